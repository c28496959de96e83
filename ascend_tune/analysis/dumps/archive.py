"""One-file dump archives: ``pack`` a dump folder, ``unpack`` it elsewhere, or read it in place.

An archive is a tar file (gzip-compressed when its name ends in ``.gz`` / ``.tgz``) whose first member,
``MANIFEST``, lists every other file with its size and sha256. Reading an archive verifies it completely before
anything is used or written: every member must be a regular file (or a folder) with a relative name that stays
inside the archive (no absolute path, no ``..``, no links or devices), listed in the manifest with a matching sum,
and every listed file must be present. ``unpack`` then writes into a new (or empty) folder only, with exclusive
creation, so nothing outside it is touched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from dataclasses import dataclass
from typing import Optional

from ...errors import InputError, OutputError
from ...formats.writing import make_folder, open_atomic, refuse_existing

MANIFEST = "ascend_tune_manifest.json"
FORMAT = "ascend-tune-dump-archive"
_BLOCK = 1 << 20


@dataclass(frozen=True)
class ArchiveSummary:
    """What was packed or unpacked."""

    archive: str
    folder: str
    files: int
    bytes: int


def pack(folder: str, archive: str, force: bool = False) -> ArchiveSummary:
    """Pack the dump ``folder`` into the file ``archive`` with a sha256 manifest.

    Parameters:
        folder: the dump folder (its files keep their paths relative to it).
        archive: the file to write; ``.tar.gz`` / ``.tgz`` compress, other names give a plain tar.
        force: replace ``archive`` if it exists.
    """
    if not os.path.isdir(folder):
        raise InputError(f"{folder} is not a folder; pass the dump folder to pack")
    root = os.path.realpath(folder)
    if os.path.realpath(archive).startswith(root + os.sep):
        raise OutputError(f"{archive} is inside the folder being packed; write the archive elsewhere")
    refuse_existing([archive], force)
    files = _folder_files(folder)
    manifest = {"format": FORMAT, "version": 1, "root": os.path.basename(root), "created": time.time(), "files": {}}
    for name in files:
        manifest["files"][name] = _file_sum(os.path.join(folder, name))
    mode = "w:gz" if archive.endswith((".gz", ".tgz")) else "w"
    parent = os.path.dirname(os.path.abspath(archive))
    make_folder(parent)
    with open_atomic(archive) as out, tarfile.open(fileobj=out, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        tar.addfile(_info(MANIFEST, len(data), time.time()), io.BytesIO(data))
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                tar.addfile(_info(name, os.path.getsize(path), os.path.getmtime(path)), fh)
    size = sum(entry["size"] for entry in manifest["files"].values())
    return ArchiveSummary(archive, folder, len(files), size)


def unpack(archive: str, folder: str) -> ArchiveSummary:
    """Verify ``archive`` completely, then write its files into ``folder`` (which must be new or empty)."""
    if os.path.exists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise OutputError(f"{folder} exists and is not an empty folder; unpack into a new folder")
    with VerifiedArchive(archive) as source:
        make_folder(folder)
        root = os.path.realpath(folder)
        for name in source.names():
            target = os.path.join(root, *name.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.realpath(os.path.dirname(target)).startswith(root):
                raise InputError(f"{archive}: member {name!r} would land outside {folder}")
            try:
                with open(target, "xb") as out:
                    out.write(source.read(name))
            except FileExistsError:
                raise OutputError(f"{target} appeared while unpacking; unpack into a new folder") from None
        total = sum(entry["size"] for entry in source.manifest["files"].values())
        return ArchiveSummary(archive, folder, len(source.names()), total)


class VerifiedArchive:
    """A dump archive opened for reading, verified in full when opened (see the module docstring).

    ``names()`` lists its files (POSIX paths, the manifest left out); ``read(name)`` returns one file's bytes.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            self._tar = tarfile.open(path, "r:*")
        except (tarfile.TarError, OSError):
            raise InputError(f"{path} is not a tar archive; pass an archive made by `ascend-tune pack`") from None
        try:
            self.manifest, self._members = self._verify()
        except BaseException:
            self._tar.close()
            raise

    def __enter__(self) -> VerifiedArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._tar.close()

    def names(self) -> list:
        return list(self._members)

    def read(self, name: str) -> bytes:
        member = self._members.get(name)
        if member is None:
            raise InputError(f"{self.path} has no file {name!r}")
        handle = self._tar.extractfile(member)
        if handle is None:
            raise InputError(f"{self.path}: {name!r} is not a regular file")
        return handle.read()

    def _verify(self) -> tuple:
        manifest: Optional[dict] = None
        sums: dict = {}
        members: dict = {}
        try:
            for member in self._tar:
                name = _safe_name(self.path, member)
                if member.isdir():
                    continue
                if name in members or (name == MANIFEST and manifest is not None):
                    raise InputError(f"{self.path}: {name!r} appears twice; the archive is not one made by `pack`")
                handle = self._tar.extractfile(member)
                if name == MANIFEST:
                    manifest = _read_manifest(self.path, handle.read() if handle else b"")
                    continue
                sums[name] = _stream_sum(handle)
                members[name] = member
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            raise InputError(f"{self.path} is damaged ({type(exc).__name__}); pack the dump again") from None
        if manifest is None:
            raise InputError(f"{self.path} has no {MANIFEST}; pass an archive made by `ascend-tune pack`")
        listed = manifest["files"]
        missing = sorted(set(listed) - set(members))
        extra = sorted(set(members) - set(listed))
        if missing or extra:
            what = f"missing {missing[:3]}" if missing else f"not in the manifest {extra[:3]}"
            raise InputError(f"{self.path} does not match its manifest ({what}); pack the dump again")
        for name, entry in listed.items():
            if sums[name] != entry:
                raise InputError(f"{self.path}: {name} does not match its sha256 in the manifest; the copy is damaged")
        return manifest, members


def is_archive(path: str) -> bool:
    """Whether ``path`` is a file tarfile can open (a candidate for :class:`VerifiedArchive`)."""
    try:
        return os.path.isfile(path) and tarfile.is_tarfile(path)
    except OSError:
        return False


def _safe_name(archive: str, member: tarfile.TarInfo) -> str:
    name = member.name
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts or "\\" in name:
        raise InputError(f"{archive}: member {name!r} is an absolute or parent path; refusing the archive")
    if not (member.isfile() or member.isdir()):
        raise InputError(f"{archive}: member {name!r} is a link or special file; refusing the archive")
    clean = "/".join(p for p in parts if p not in ("", "."))
    if not clean:
        raise InputError(f"{archive}: a member has an empty name; refusing the archive")
    return clean


def _read_manifest(archive: str, data: bytes) -> dict:
    try:
        manifest = json.loads(data)
    except ValueError:
        raise InputError(f"{archive}: {MANIFEST} is not JSON; pack the dump again") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if manifest.get("format") != FORMAT or not isinstance(files, dict):
        raise InputError(f"{archive}: {MANIFEST} is not an ascend_tune manifest; pack the dump again")
    return manifest


def _folder_files(folder: str) -> list:
    names = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for entry in dirnames + filenames:
            path = os.path.join(dirpath, entry)
            if os.path.islink(path):
                raise InputError(f"{path} is a link; an archive carries regular files only (copy the target in)")
        for filename in sorted(filenames):
            path = os.path.join(dirpath, filename)
            if not os.path.isfile(path):
                raise InputError(f"{path} is not a regular file; remove it from the dump folder")
            names.append(os.path.relpath(path, folder).replace(os.sep, "/"))
    if not names:
        raise InputError(f"{folder} is empty; pass the dump folder to pack")
    return names


def _file_sum(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            return _stream_sum(fh)
    except OSError as exc:
        raise InputError(f"cannot read {path} ({exc.strerror or exc})") from None


def _stream_sum(handle: object) -> dict:
    digest, size = hashlib.sha256(), 0
    while handle is not None:
        block = handle.read(_BLOCK)  # type: ignore[attr-defined]
        if not block:
            break
        digest.update(block)
        size += len(block)
    return {"sha256": digest.hexdigest(), "size": size}


def _info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    info.uname = info.gname = ""
    return info
