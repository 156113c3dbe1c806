"""An environment whose worker dies on every step, as when the service behind it is down
(a search env's retriever, ScienceWorld's JVM). Its own small module: a worker process
imports it to build the environment, and nothing heavier."""

from __future__ import annotations

import os

from roleagent.envs import EnvSpec, register_env
from roleagent.envs.scripted import ScriptedEnv


class DownEnv(ScriptedEnv):
    name = "down"

    def step(self, action: str):
        os._exit(3)


register_env(EnvSpec("down", "tests.down_env:DownEnv", (), "dev", "test env whose every step crashes"))
