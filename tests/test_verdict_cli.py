"""The verdict subcommands on bad input: exit 2 with one line on stderr, no traceback, nothing written outside
the output, archives verified before anything is used."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

from ascend_tune.analysis.dumps.archive import MANIFEST
from ascend_tune.cli import main


def cli(*argv, cwd=None):
    """Run ``ascend-tune`` in a fresh process, as a user does."""
    return subprocess.run([sys.executable, "-m", "ascend_tune.cli", *map(str, argv)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def assert_one_line_error(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("ascend-tune") and "error: " in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def bad_inputs(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "words.txt").write_text("no loss here\n")
    (tmp_path / "dump.json").write_text(json.dumps({"task": "statistics"}))
    (tmp_path / "broken.json").write_text('{"data": {')
    (tmp_path / "empty_dir").mkdir()
    return tmp_path


def test_every_verdict_command_rejects_bad_input_with_one_line(bad_inputs, capsys):
    t = bad_inputs
    cases = [
        ["compare-loss", t / "missing", t / "words.txt"],
        ["compare-loss", t / "empty.txt", t / "words.txt"],
        ["compare-loss", t / "binary.bin", t / "binary.bin"],
        ["compare-loss", t / "words.txt", t / "words.txt"],
        ["compare-loss", t / "empty_dir", t / "empty_dir"],
        ["perf", t / "binary.bin"],
        ["compare-dump", t / "missing", t / "dump.json"],
        ["compare-dump", t / "dump.json", t / "dump.json"],
        ["compare-dump", t / "broken.json", t / "broken.json"],
        ["compare-dump", t / "binary.bin", t / "binary.bin"],
        ["compare-dump", t / "empty_dir", t / "empty_dir"],
        ["parse", t / "empty_dir", "Functional.linear.0.forward"],
        ["overflow", t / "words.txt"],
        ["pack", t / "empty_dir", "-o", t / "a.tar"],
        ["unpack", t / "binary.bin", "-o", t / "out"],
    ]
    for argv in cases:
        assert main([str(a) for a in argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("ascend-tune: error: ") and err.count("\n") == 1, (argv, err)
    assert sorted(os.listdir(t)) == ["binary.bin", "broken.json", "dump.json", "empty.txt", "empty_dir", "words.txt"]


def test_bad_input_in_a_fresh_process_prints_no_traceback(bad_inputs):
    assert_one_line_error(cli("compare-loss", bad_inputs / "binary.bin", bad_inputs / "empty.txt"))
    assert_one_line_error(cli("compare-dump", bad_inputs / "broken.json", bad_inputs / "dump.json"))
    assert_one_line_error(cli("compare-loss", "a", "b", "--threshold", "-1"))


def write_dump(folder):
    folder.mkdir(parents=True)
    entry = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
             "Norm": 1.0, "requires_grad": False}
    data = {"Torch.relu.0.forward": {"input_args": [entry], "input_kwargs": {}, "output": [entry]}}
    (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    return folder


def evil_archive(path, member_name=None, link=False, tamper=False):
    """A tar shaped like pack's output, with one hostile or damaged member."""
    payload = b"owned\n"
    name = member_name or "step0/rank0/dump.json"
    manifest = {"format": "ascend-tune-dump-archive", "version": 1,
                "files": {name: {"sha256": "0" * 64 if tamper else _sha(payload), "size": len(payload)}}}
    with tarfile.open(path, "w") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(name)
        if link:
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


def _sha(data):
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "link", "tamper"])
def test_hostile_or_damaged_archives_are_refused_before_anything_is_written(tmp_path, kind, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    options = {"dotdot": dict(member_name="../../escaped.txt"), "absolute": dict(member_name=str(tmp_path / "abs")),
               "link": dict(link=True), "tamper": dict(tamper=True)}[kind]
    archive = evil_archive(work / "evil.tar", **options)
    before = sorted(os.listdir(tmp_path))
    for argv in (["unpack", archive, "-o", work / "out"], ["compare-dump", archive, archive]):
        assert main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ascend-tune: error: ") and err.count("\n") == 1, err
    assert sorted(os.listdir(tmp_path)) == before
    assert sorted(os.listdir(work)) == ["evil.tar"]  # not even the output folder


def test_a_hostile_archive_in_a_fresh_process_prints_no_traceback(tmp_path):
    archive = evil_archive(tmp_path / "evil.tar", member_name="../escaped.txt")
    assert_one_line_error(cli("unpack", archive, "-o", tmp_path / "out", cwd=tmp_path))
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "escaped.txt").exists()


def test_pack_writes_a_verified_archive_and_refuses_to_overwrite(tmp_path, capsys):
    dump = write_dump(tmp_path / "dump" / "step0" / "rank0")
    archive = tmp_path / "dump.tgz"
    assert main(["pack", str(tmp_path / "dump"), "-o", str(archive)]) == 0
    assert "1 dump(s)" in capsys.readouterr().out
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(MANIFEST))
    assert names[0] == MANIFEST and "step0/rank0/dump.json" in names
    assert manifest["files"]["step0/rank0/dump.json"]["sha256"] == _sha((dump / "dump.json").read_bytes())
    before = archive.read_bytes()
    assert main(["pack", str(tmp_path / "dump"), "-o", str(archive)]) == 2
    assert "--force" in capsys.readouterr().err and archive.read_bytes() == before
    assert main(["overflow", str(archive)]) == 0  # archives are read in place
    assert main(["unpack", str(archive), "-o", str(tmp_path / "copy")]) == 0
    assert (tmp_path / "copy" / "step0" / "rank0" / "dump.json").read_bytes() == (dump / "dump.json").read_bytes()


def test_pack_refuses_links_inside_the_dump(tmp_path, capsys):
    write_dump(tmp_path / "dump")
    os.symlink("/etc/hostname", tmp_path / "dump" / "stack.json")
    assert main(["pack", str(tmp_path / "dump"), "-o", str(tmp_path / "d.tar")]) == 2
    assert "link" in capsys.readouterr().err and not (tmp_path / "d.tar").exists()


def test_building_the_parser_imports_no_numpy_or_matplotlib():
    code = ("import sys; from ascend_tune.cli.parser import build_parser; build_parser(); "
            "print(sorted(m for m in ('numpy', 'matplotlib', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_help_lists_the_verdict_commands():
    proc = cli("--help")
    for command in ("compare-loss", "perf", "compare-dump", "parse", "overflow", "pack", "unpack"):
        assert command in proc.stdout
