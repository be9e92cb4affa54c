"""A stand-in for SGLang in tests: SGLang needs a GPU, which this machine does not have.

Only `python -m sglang.launch_server` exists. It is put on the agent's PYTHONPATH by the tests,
never installed. See launch_server.py for what it checks and how it answers.
"""
