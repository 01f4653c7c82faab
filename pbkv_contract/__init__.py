"""The PBKV contract: what the SDK, the server, the simulator, the predictor and the engine backends agree on.

Standard library only, so that any side can import it without pulling in another side's stack:

- :mod:`pbkv_contract.hints`: hint protocol v1 (headers, body form, end and graph endpoints).
- :mod:`pbkv_contract.blocks`: canonical prompt text and chained prefix hashes (block identity).
- :mod:`pbkv_contract.features`: the request feature vector (semantic signal for the predictor).
- :mod:`pbkv_contract.trace`: trace format v1 records, reader and writer.
- :mod:`pbkv_contract.prediction`: the prediction interface (``Predictor``, ``Prediction``).

See ``docs/architecture.md`` for the design these modules implement.
"""

__version__ = "0.1.0"
