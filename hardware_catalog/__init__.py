"""Hardware catalog: GPUs, machines and LLMs as validated, cited data.

One TOML file per entry under ``data/{gpus,machines,models}/``; ``load_catalog()`` reads
them into frozen dataclasses on first use (never at import) and caches the result::

    from hardware_catalog import load_catalog
    cat = load_catalog()
    cat.machine("dgx-h100").power_w(0.5)      # W, GPUs capped at 50% of TDP
    cat.model("llama2-70b").kv_bytes_per_token  # 327680.0
"""

from ._loader import load_catalog
from ._schema import GPU, LLM, Catalog, Machine
from ._text import MAX_INPUT_BYTES, decode_text, read_input
from .errors import CatalogError, CatalogValidationError, UnknownNameError

__all__ = [
    "GPU",
    "Machine",
    "LLM",
    "Catalog",
    "load_catalog",
    "CatalogError",
    "UnknownNameError",
    "CatalogValidationError",
    "decode_text",
    "read_input",
    "MAX_INPUT_BYTES",
]
