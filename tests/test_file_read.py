"""file_read: allowed directories on the resolved path, size/encoding/type limits, metadata."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from jarvis.core.types import ErrorType, ToolCall
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.file_read import MAX_FILE_BYTES, FileReadTool


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    data = tmp_path / "data"
    evil = tmp_path / "data-evil"
    outside = tmp_path / "outside"
    for d in (data, evil, outside):
        d.mkdir()
    (data / "README.md").write_text("line 1\nline 2\nline 3\n", encoding="utf-8")
    (evil / "secret.txt").write_text("evil secret", encoding="utf-8")
    (outside / "secret.txt").write_text("outside secret", encoding="utf-8")
    return {"root": tmp_path, "data": data, "evil": evil, "outside": outside}


def run(tool: FileReadTool, **arguments):
    """Through the executor (schema validation, timeout) as a model would call it."""
    return ToolExecutor([tool], default_timeout=5).execute(ToolCall("c", "file_read", arguments))


def test_reference_example_shape(tree):
    reader = FileReadTool(allowed_dirs=[str(tree["data"])])
    result = reader.execute(path=str(tree["data"] / "README.md"), max_lines=50)
    assert result.success
    assert result.content == "line 1\nline 2\nline 3\n"
    assert result.metadata["path"] == str((tree["data"] / "README.md").resolve())
    assert result.metadata["size_bytes"] == 21
    assert result.metadata["truncated"] is False and result.metadata["lines_total"] == 3


def test_max_lines_cuts_and_says_so(tree):
    result = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(tree["data"] / "README.md"),
                 max_lines=2)
    assert result.content == "line 1\nline 2\n"
    assert result.metadata["truncated"] is True and result.metadata["lines_total"] == 3
    assert run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(tree["data"] / "README.md"),
               max_lines=0).error_type is ErrorType.INVALID_ARGS
    assert FileReadTool(allowed_dirs=[str(tree["root"])]).execute(path=str(tree["data"] / "README.md"),
                                  max_lines=True).error_type is ErrorType.INVALID_ARGS


def denied_like(result) -> None:
    assert not result.success and result.error_type is ErrorType.DENIED
    assert "access denied or file not found" in result.content
    assert "secret" not in result.content.replace("secret.txt", "")


def test_sibling_folder_with_a_common_prefix_is_outside(tree):
    reader = FileReadTool(allowed_dirs=[str(tree["data"])])
    denied_like(run(reader, path=str(tree["evil"] / "secret.txt")))


def test_dotdot_escape_is_denied(tree):
    reader = FileReadTool(allowed_dirs=[str(tree["data"])])
    denied_like(run(reader, path=str(tree["data"]) + "/../outside/secret.txt"))
    denied_like(run(reader, path=str(tree["data"]) + "/../data-evil/secret.txt"))


def test_symlink_escaping_the_allowed_folder_is_denied(tree):
    link = tree["data"] / "link.txt"
    link.symlink_to(tree["outside"] / "secret.txt")
    dir_link = tree["data"] / "sub"
    dir_link.symlink_to(tree["outside"], target_is_directory=True)
    reader = FileReadTool(allowed_dirs=[str(tree["data"])])
    denied_like(run(reader, path=str(link)))
    denied_like(run(reader, path=str(dir_link / "secret.txt")))


def test_symlink_inside_the_allowed_folder_works(tree):
    (tree["data"] / "alias.md").symlink_to(tree["data"] / "README.md")
    result = run(FileReadTool(allowed_dirs=[str(tree["data"])]), path=str(tree["data"] / "alias.md"))
    assert result.success and result.metadata["path"] == str((tree["data"] / "README.md").resolve())


def test_allowed_folder_given_through_a_symlink_still_works(tree):
    alias = tree["root"] / "alias-of-data"
    alias.symlink_to(tree["data"], target_is_directory=True)
    reader = FileReadTool(allowed_dirs=[str(alias)])
    assert run(reader, path=str(tree["data"] / "README.md")).success
    assert run(reader, path=str(alias / "README.md")).success


def test_relative_paths_resolve_against_the_working_directory(tree, monkeypatch):
    monkeypatch.chdir(tree["data"])
    reader = FileReadTool(allowed_dirs=["."])
    assert run(reader, path="README.md").success
    denied_like(run(reader, path="../outside/secret.txt"))


def test_missing_and_denied_files_outside_look_identical(tree):
    reader = FileReadTool(allowed_dirs=[str(tree["data"])])
    probe = tree["outside"] / "maybe.txt"
    missing = run(reader, path=str(probe))
    probe.write_text("now it exists", encoding="utf-8")
    present = run(reader, path=str(probe))
    assert (missing.content, missing.error_type, missing.metadata) == (
        present.content, present.error_type, present.metadata)
    # and a missing folder outside too
    nowhere = run(reader, path=str(tree["outside"] / "no" / "such" / "file"))
    assert nowhere.error_type is missing.error_type
    assert nowhere.content.split(":")[0] == missing.content.split(":")[0]


def test_missing_file_inside_is_reported_as_not_found(tree):
    result = run(FileReadTool(allowed_dirs=[str(tree["data"])]), path=str(tree["data"] / "nope"))
    assert not result.success and "file not found" in result.content
    missing = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(tree["root"] / "nope"))
    assert missing.content.startswith("file not found")


def test_fifo_is_refused_without_hanging(tree):
    fifo = tree["data"] / "pipe"
    os.mkfifo(fifo)
    start = time.perf_counter()
    result = run(FileReadTool(allowed_dirs=[str(tree["data"])]), path=str(fifo))
    assert time.perf_counter() - start < 1.0
    assert not result.success and result.error_type is ErrorType.EXECUTION
    assert "not a regular file" in result.content


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/proc/self/status",
                                  "/proc/self/environ", "/sys/kernel/notes"])
def test_devices_and_pseudo_files_are_refused(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    start = time.perf_counter()
    result = run(FileReadTool(), path=path)
    assert time.perf_counter() - start < 1.0
    assert not result.success and result.error_type is ErrorType.DENIED
    assert "not a regular file" in result.content or "pseudo-file" in result.content


def test_symlink_to_a_device_is_refused(tree):
    (tree["data"] / "zero").symlink_to("/dev/zero")
    result = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(tree["data"] / "zero"))
    assert not result.success and result.error_type is ErrorType.DENIED


def test_directory_is_refused(tree):
    result = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(tree["data"]))
    assert not result.success and "is a directory" in result.content


def test_file_over_one_megabyte_is_refused(tree):
    big = tree["data"] / "big.txt"
    big.write_bytes(b"a" * (MAX_FILE_BYTES + 1))
    result = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(big))
    assert not result.success and f"the limit is {MAX_FILE_BYTES}" in result.content
    exact = tree["data"] / "exact.txt"
    exact.write_bytes(b"a" * MAX_FILE_BYTES)
    ok = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(exact))
    assert ok.success and ok.metadata["size_bytes"] == MAX_FILE_BYTES


@pytest.mark.parametrize("payload, words", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
    (b"caf\xe9 latin-1", "not UTF-8 text"),
    (b"\xff\xfe\xfd", "not UTF-8 text"),
])
def test_binary_and_invalid_utf8_are_refused(tree, payload, words):
    target = tree["data"] / "blob"
    target.write_bytes(payload)
    result = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(target))
    assert not result.success and words in result.content


def test_utf8_text_with_multibyte_characters_is_read(tree):
    target = tree["data"] / "u.txt"
    target.write_text("héllo 🌍\n", encoding="utf-8")
    result = run(FileReadTool(allowed_dirs=[str(tree["root"])]), path=str(target))
    assert result.content == "héllo 🌍\n" and result.metadata["size_bytes"] == len("héllo 🌍\n".encode())


@pytest.mark.parametrize("path", ["", "   ", "a\x00b", "/etc/passwd\x00.txt", "x" * 5000])
def test_bad_paths_are_refused(path):
    result = run(FileReadTool(), path=path)
    assert not result.success
    assert result.error_type in (ErrorType.EXECUTION, ErrorType.INVALID_ARGS)
    assert "path" in result.content


def test_nul_in_a_json_path_is_refused():
    executor = ToolExecutor([FileReadTool()])
    result = executor.execute(ToolCall("c", "file_read", '{"path": "/etc/hostname\\u0000x"}'))
    assert not result.success and "not a valid file path" in result.content


def test_spec_lists_allowed_directories(tree):
    spec = FileReadTool(allowed_dirs=[str(tree["data"])]).spec
    assert spec.name == "file_read" and spec.category == "filesystem"
    assert str(tree["data"].resolve()) in spec.description
    assert spec.parameters["required"] == ["path"]


def test_a_single_allowed_folder_may_be_given_as_a_string(tree):
    reader = FileReadTool(allowed_dirs=str(tree["data"]))
    assert reader.allowed_dirs == [tree["data"].resolve()]
    assert run(reader, path=str(tree["data"] / "README.md")).success
    denied_like(run(reader, path=str(tree["outside"] / "secret.txt")))
