"""cxlpool_kv: Python client of the cxlpool box's KV-cache store.

Standard library only. See client.Client for the LMCache- and SGLang
HiCache-shaped methods, wire for the protocol codec (kv/wire/PROTOCOL.md).
"""

from .client import Client, FileMapper, KVError, Unmapped, where_from_agent
from . import wire

__all__ = ["Client", "FileMapper", "KVError", "Unmapped", "where_from_agent", "wire"]
