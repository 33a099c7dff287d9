"""Java class files from a job's classpath (jars, directories): the fields, generic signatures and modifiers of user classes.

Boundary: reads only what serializer layouts depend on (JVM spec chapter 4: constant pool, access
flags, super class, fields with their `Signature` attributes); never loads or runs a class. Kryo's
FieldSerializer and Scala case classes lay their values out by these fields, which Flink's
savepoints do not store.
"""

from __future__ import annotations

import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from statekit.errors import InvalidArgumentError

ACC_FINAL = 0x0010
ACC_STATIC = 0x0008
ACC_TRANSIENT = 0x0080
ACC_SYNTHETIC = 0x1000
ACC_ENUM = 0x4000
ACC_INTERFACE = 0x0200
ACC_ABSTRACT = 0x0400
_CONSTANT_SIZES = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}


@dataclass(frozen=True)
class JavaField:
    """One declared field: name, JVM descriptor (``I``, ``Ljava/lang/String;``), generic signature or None, access flags."""

    name: str
    descriptor: str
    signature: str | None
    access: int

    @property
    def is_static(self) -> bool:
        return bool(self.access & ACC_STATIC)

    @property
    def is_transient(self) -> bool:
        return bool(self.access & ACC_TRANSIENT)

    @property
    def is_synthetic(self) -> bool:
        return bool(self.access & ACC_SYNTHETIC)


@dataclass(frozen=True)
class JavaClass:
    """A class as its class file declares it: binary name (``a.b.C$D``), access flags, super class and fields in declaration order."""

    name: str
    access: int
    super_name: str | None
    fields: tuple[JavaField, ...]

    @property
    def is_final(self) -> bool:
        return bool(self.access & ACC_FINAL)

    @property
    def is_enum(self) -> bool:
        return bool(self.access & ACC_ENUM)

    @property
    def enum_constants(self) -> tuple[str, ...]:
        """An enum's constants in ordinal order (the class file keeps declaration order)."""
        return tuple(f.name for f in self.fields if f.access & ACC_ENUM)


def parse_class(data: bytes, where: str) -> JavaClass:
    """One class file's name, flags, super class and fields."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise InvalidArgumentError(f"{where} is not a Java class file (no CAFEBABE magic).")
    pos = 8
    (count,) = struct.unpack_from(">H", data, pos)
    pos += 2
    utf8: dict[int, str] = {}
    classes: dict[int, int] = {}
    i = 1
    while i < count:
        tag = data[pos]
        pos += 1
        if tag == 1:
            (n,) = struct.unpack_from(">H", data, pos)
            utf8[i] = data[pos + 2 : pos + 2 + n].decode("utf-8", "replace")  # modified UTF-8: names are ASCII here
            pos += 2 + n
        elif tag == 7:
            classes[i] = struct.unpack_from(">H", data, pos)[0]
            pos += 2
        elif tag in _CONSTANT_SIZES:
            pos += _CONSTANT_SIZES[tag]
        else:
            raise InvalidArgumentError(f"{where}: unknown constant-pool tag {tag}; not a class file statekit reads.")
        i += 2 if tag in (5, 6) else 1
    access, this_idx, super_idx = struct.unpack_from(">HHH", data, pos)
    pos += 6
    (n_if,) = struct.unpack_from(">H", data, pos)
    pos += 2 + 2 * n_if
    (n_fields,) = struct.unpack_from(">H", data, pos)
    pos += 2
    fields = []
    for _ in range(n_fields):
        f_access, name_idx, desc_idx, n_attr = struct.unpack_from(">HHHH", data, pos)
        pos += 8
        signature = None
        for _ in range(n_attr):
            a_name, a_len = struct.unpack_from(">HI", data, pos)
            if utf8.get(a_name) == "Signature":
                signature = utf8[struct.unpack_from(">H", data, pos + 6)[0]]
            pos += 6 + a_len
        fields.append(JavaField(utf8[name_idx], utf8[desc_idx], signature, f_access))
    name = utf8[classes[this_idx]].replace("/", ".")
    sup = utf8[classes[super_idx]].replace("/", ".") if super_idx else None
    return JavaClass(name, access, sup, tuple(fields))


class ClassPath:
    """User classes found in jars and class directories, looked up by binary name (``a.b.Outer$Inner``)."""

    def __init__(self, entries: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.entries = [Path(e) for e in entries]
        for e in self.entries:
            if not e.exists():
                raise InvalidArgumentError(f"classpath entry {e} does not exist; give the job's jar or its classes directory.")
        self._cache: dict[str, JavaClass | None] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def _bytes(self, name: str) -> tuple[bytes, str] | None:
        rel = name.replace(".", "/") + ".class"
        for e in self.entries:
            if e.is_dir():
                p = e / rel
                if p.is_file():
                    return p.read_bytes(), str(p)
            elif zipfile.is_zipfile(e):
                with zipfile.ZipFile(e) as z:
                    try:
                        return z.read(rel), f"{e}!{rel}"
                    except KeyError:
                        continue
        return None

    def find(self, name: str) -> JavaClass | None:
        """The class `name`, or None when no entry holds it."""
        if name not in self._cache:
            got = self._bytes(name)
            self._cache[name] = parse_class(*got) if got else None
        return self._cache[name]
