"""Run with no network at all: the libraries doc-indexer uses are told to stay offline.

Imported first by the `tasks` package, so the variables are set before any model code loads.
A value the user set already wins.
"""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "SCARF_NO_ANALYTICS": "true",
    "UNSTRUCTURED_DISABLE_NOTICE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

for _name, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_name, _value)
