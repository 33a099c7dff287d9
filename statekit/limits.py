"""What no savepoint holds more of: the longest text (a uid, an operator or state name, a type string).

Below both the identifier type (`statekit.identifiers` refuses a longer uid) and the manifest schema
(`statekit.format.manifest_schema` refuses any longer text), so that each reads the one rule.
"""

from __future__ import annotations

__all__ = ["MAX_TEXT"]

MAX_TEXT = 64 * 1024  # uids, names and type strings
