"""SEAL (Hu et al., 2026): diagnosis-weighted advantages and an evolved tool interface
(``method.py``), config section ``seal`` (``config.py``). The BFCL diagnosis and interface
live with the environment (``roleagent.envs.bfcl``), the weights in ``roleagent.algos.seal``."""
