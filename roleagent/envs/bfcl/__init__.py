"""BFCL v3 multi-turn environment, SEAL diagnosis, interface evolution and report.

Importing this package does not import ``bfcl_eval``; ``env.BFCLEnv`` needs it.
"""
