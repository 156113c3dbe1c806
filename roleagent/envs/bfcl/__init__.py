"""BFCL v3 multi-turn environment, SEAL diagnosis, interface evolution and report.

SEAL: Hu et al., 2026, "SEAL: Synergistic Co-Evolution of Agents and Learning Environments".

Importing this package does not import ``bfcl_eval``; ``env.BFCLEnv`` needs it.
"""
