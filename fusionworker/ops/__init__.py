"""The operator layer: the health check, the ``info`` document, the embedded
Redis for trying things out, and the demo jobs. Imports the layers below it
(``tests/test_layers.py``); the CLI and the web UI sit on top.
"""
