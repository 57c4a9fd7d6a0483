"""The core layer: the data and the producer side, no process of its own.

Keys, the job record, function references and the allow-list, the codec, the
settings, Redis connections, the Lua scripts, queues, batches, dependencies,
worker records (``admin.py``), the middleware hook points (``hooks.py``) and the
producer side of OpenTelemetry (``tracing.py``). Imports nothing above itself
(``tests/test_layers.py``); see docs/design.md, "Layers".
"""
