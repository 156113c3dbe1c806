"""The report page's stylesheet and its rollout browser (vanilla JavaScript, no network).

The browser reads the rollouts from the page's JSON block and builds every element with
``textContent``: text from a rollout (model output, observations) is never parsed as HTML.
Errors thrown on the page are written into ``#js-errors`` (so a DOM dump shows them), and
``body[data-ready]`` is set once the browser has drawn its first group.
"""

CSS = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ccc; }
h3 { font-size: 14px; margin: 14px 0 4px; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; }
svg.chart { background: #fafafa; border: 1px solid #e4e4e4; }
svg .title { font-size: 12px; font-weight: 600; } svg .tick, svg .axis { font-size: 10px; fill: #555; }
svg .legend { font-size: 10px; } svg .grid { stroke: #e0e0e0; }
table { border-collapse: collapse; margin: 6px 0; } td, th { border: 1px solid #ddd; padding: 2px 6px; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; } #js-errors { color: #b00; white-space: pre-wrap; }
.controls select { margin-right: 10px; max-width: 420px; }
.group { display: flex; gap: 8px; overflow-x: auto; align-items: flex-start; padding-bottom: 8px; }
.rollout-col { min-width: 270px; max-width: 340px; flex: 0 0 auto; border: 1px solid #ccc; border-radius: 4px; }
.rollout-col > .head { padding: 4px 6px; background: #f2f2f2; font-weight: 600; }
.rollout-col.win > .head { background: #dff0d8; } .rollout-col.lose > .head { background: #f8e0e0; }
.step { border-top: 1px solid #e6e6e6; padding: 4px 6px; }
.step .act { font-family: monospace; font-weight: 600; word-break: break-word; }
.step .kv { font-family: monospace; font-size: 11px; color: #333; word-break: break-word; }
.pos { color: #1a7f37; } .neg { color: #c62828; } .invalid { color: #c62828; }
pre.text { white-space: pre-wrap; word-break: break-word; font-size: 11px; margin: 2px 0; max-height: 220px;
  overflow: auto; background: #fbfbfb; }
.failures li { margin-bottom: 4px; }
"""

JS = r"""
(function () {
  "use strict";
  var errorBox = document.getElementById("js-errors");
  window.addEventListener("error", function (e) { errorBox.textContent += "error: " + e.message + "\n"; });
  var data = JSON.parse(document.getElementById("report-data").textContent);

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function num(v) {
    if (typeof v !== "number") { return v === null || v === undefined ? "–" : String(v); }
    return Number.isInteger(v) ? String(v) : v.toPrecision(3);
  }
  function signed(v) { return typeof v === "number" ? (v > 0 ? "pos" : (v < 0 ? "neg" : "")) : ""; }
  function kv(parent, label, value, cls) {
    var line = el("div", "kv " + (cls || ""), label + " " + value);
    parent.appendChild(line);
    return line;
  }
  function fill(select, values, labels) {
    select.textContent = "";
    values.forEach(function (v, i) { var o = el("option", null, labels ? labels[i] : v); o.value = String(i); select.appendChild(o); });
  }

  var runSel = document.getElementById("rb-run"), fileSel = document.getElementById("rb-file");
  var taskSel = document.getElementById("rb-task"), view = document.getElementById("rb-view");
  var state = { run: null, file: null, groups: [] };

  function iterationOf(stem) { var m = String(stem).match(/^iter_(\d+)$/); return m ? parseInt(m[1], 10) : null; }

  function stepCard(step, t, labels) {
    var card = el("div", "step");
    card.appendChild(el("div", "act" + (step.valid ? "" : " invalid"), "t" + t + "  " + (step.action === null ? "(invalid) " + step.action_text : step.action)));
    var algo = (step.extras || {}).algo;
    var reward = "reward " + num(step.reward) + (step.penalty ? " (penalty " + num(step.penalty) + ")" : "");
    kv(card, "", reward);
    if (algo) {
      var parts = [];
      if (algo.episode !== undefined) { parts.push("episode " + num(algo.episode)); }
      if (algo.step !== undefined) { parts.push("step " + num(algo.step)); }
      kv(card, "A =", num(algo.advantage) + (parts.length ? "  (" + parts.join(", ") + ")" : ""), signed(algo.advantage));
      if (algo.state_group !== undefined) {
        kv(card, "state group", "#" + algo.state_group + (algo.state_group_size !== undefined ? " (size " + algo.state_group_size + ")" : ""));
      }
    }
    var wia = (step.extras || {}).wia;
    if (wia && wia.predictions) {
      wia.predictions.forEach(function (p, h) {
        var score = wia.scores ? wia.scores[h] : null;
        kv(card, "predicted s+" + (h + 1) + ":", JSON.stringify(p) + "  score " + num(score));
      });
    }
    if (labels && labels[t] !== undefined) { kv(card, "SEAL label", JSON.stringify(labels[t])); }
    Object.keys(step.extras || {}).forEach(function (name) {
      if (name !== "algo" && name !== "wia" && name !== "chat") { kv(card, name + ":", JSON.stringify(step.extras[name])); }
    });
    var details = el("details");
    details.appendChild(el("summary", null, "observation"));
    details.appendChild(el("pre", "text", step.observation));
    if (step.action_text !== step.action) { details.appendChild(el("pre", "text", "generated: " + step.action_text)); }
    card.appendChild(details);
    return card;
  }

  function column(traj, index) {
    var col = el("div", "rollout-col " + (traj.crashed ? "crash" : (traj.success ? "win" : "lose")));
    var status = traj.crashed ? "CRASHED" : (traj.success ? "success" : "failure");
    col.appendChild(el("div", "head", "#" + index + " " + status + "  return " + num(traj["return"]) + "  seed " + num(traj.seed)));
    var seal = (traj.extras || {}).seal;
    if (seal) { kv(col, " SEAL weight", num(seal.weight) + (seal.applied ? "" : " (not applied)")); }
    var diagnosis = traj.diagnosis || null;
    var labels = diagnosis && Array.isArray(diagnosis.turn_labels) ? diagnosis.turn_labels : null;
    if (diagnosis) {
      var d = el("details"); d.appendChild(el("summary", null, "diagnosis")); d.appendChild(el("pre", "text", JSON.stringify(diagnosis, null, 1)));
      col.appendChild(d);
    }
    traj.steps.forEach(function (step, t) { col.appendChild(stepCard(step, t, labels)); });
    col.appendChild(el("pre", "text", "final: " + traj.final_observation));
    return col;
  }

  function render() {
    view.textContent = "";
    var group = state.groups[parseInt(taskSel.value, 10)];
    if (!group) { view.appendChild(el("p", "note", "no rollouts in this file")); return; }
    var first = group.items[0].traj;
    view.appendChild(el("p", "note", first.task_id + " — " + first.instruction));
    var row = el("div", "group");
    group.items.forEach(function (item) { row.appendChild(column(item.traj, item.index)); });
    view.appendChild(row);
    var iteration = iterationOf(state.file);
    var failures = (state.run.failures || []).filter(function (f) { return f.task_id === first.task_id && f.iteration === iteration; });
    if (failures.length) {
      view.appendChild(el("h3", null, "failure memory entries (Agent-In-World) for this task, iteration " + iteration));
      var list = el("ul", "failures");
      failures.forEach(function (f) {
        list.appendChild(el("li", null, f.dominant_type + " @ step " + num(f.critical_step) + ": " + f.core_lesson + " — " + f.detail));
      });
      view.appendChild(list);
    }
  }

  function chooseFile() {
    state.file = state.files[parseInt(fileSel.value, 10)];
    var trajs = state.run.files[state.file] || [], byTask = {}, order = [];
    trajs.forEach(function (traj, i) {
      var key = traj.task_id + "\u0000" + traj.seed;
      if (!(key in byTask)) { byTask[key] = { items: [] }; order.push(key); }
      byTask[key].items.push({ traj: traj, index: i });
    });
    state.groups = order.map(function (k) { return byTask[k]; });
    fill(taskSel, state.groups, state.groups.map(function (g) {
      var wins = g.items.filter(function (x) { return x.traj.success; }).length;
      return g.items[0].traj.task_id + " (" + wins + "/" + g.items.length + " won)";
    }));
    // open on the first task whose rollouts disagree (where the advantages are not all 0)
    var mixed = state.groups.findIndex(function (g) {
      var wins = g.items.filter(function (x) { return x.traj.success; }).length;
      return wins > 0 && wins < g.items.length;
    });
    taskSel.value = String(Math.max(mixed, 0));
    render();
  }

  function chooseRun() {
    state.run = data.runs[parseInt(runSel.value, 10)];
    state.files = Object.keys(state.run.files).sort(function (a, b) {
      var ia = iterationOf(a), ib = iterationOf(b);
      if ((ia === null) !== (ib === null)) { return ia === null ? 1 : -1; }
      return a < b ? -1 : (a > b ? 1 : 0);
    });
    fill(fileSel, state.files);
    var iterations = state.files.filter(function (f) { return iterationOf(f) !== null; }).length;
    fileSel.value = String(Math.max(iterations - 1, 0));  // open on the latest iteration's dump
    chooseFile();
  }

  runSel.addEventListener("change", chooseRun);
  fileSel.addEventListener("change", chooseFile);
  taskSel.addEventListener("change", render);
  fill(runSel, data.runs, data.runs.map(function (r) { return r.name; }));
  if (data.runs.length) { chooseRun(); }
  var target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
  if (target) { target.scrollIntoView(); }  // the browser's rollouts are drawn after the page loaded
  document.body.setAttribute("data-ready", "1");
})();
"""
