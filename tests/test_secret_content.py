"""Secrets recognised by what a file holds, whatever its name: file_read refuses them,
memory_index skips them (and says so), mcp_read_resource refuses a file:// resource holding
one. Real keys (made with `cryptography`), real files, the CLI as a subprocess, a real MCP
server."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization as ser
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from jarvis.core.types import ErrorType, ToolCall
from jarvis.security.paths import MAX_FILE_BYTES
from jarvis.security.secret_content import secret_in
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.file_read import FileReadTool

FILES_SERVER = Path(__file__).parent / "mcp_servers" / "files.py"
_RSA = rsa.generate_private_key(65537, 2048)


def _pem(key, fmt, encryption=None) -> str:
    return key.private_bytes(ser.Encoding.PEM, fmt, encryption or ser.NoEncryption()).decode()


RSA_PEM = _pem(_RSA, ser.PrivateFormat.TraditionalOpenSSL)
RSA_ENCRYPTED = _pem(_RSA, ser.PrivateFormat.TraditionalOpenSSL, ser.BestAvailableEncryption(b"pw"))
PKCS8_ENCRYPTED = _pem(_RSA, ser.PrivateFormat.PKCS8, ser.BestAvailableEncryption(b"pw"))
OPENSSH = _pem(ed25519.Ed25519PrivateKey.generate(), ser.PrivateFormat.OpenSSH)
P8 = _pem(ec.generate_private_key(ec.SECP256R1()), ser.PrivateFormat.PKCS8)  # Apple's .p8
SEC1 = _pem(ec.generate_private_key(ec.SECP384R1()), ser.PrivateFormat.TraditionalOpenSSL)
PUBLIC = _RSA.public_key().public_bytes(ser.Encoding.PEM,
                                        ser.PublicFormat.SubjectPublicKeyInfo).decode()
BODY = "\n".join(OPENSSH.splitlines()[1:-1])  # the key without its BEGIN/END lines
PGP = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\nComment: mine\n\n"
       + "\n".join(base64.b64encode(os.urandom(48)).decode() for _ in range(6))
       + "\n=Zx8m\n-----END PGP PRIVATE KEY BLOCK-----\n")
AGE = ("# created: 2025-01-01T00:00:00Z\n# public key: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2el"
       "w8zmrj2kg5sfn9aqmcac8p\nAGE-SECRET-KEY-1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQ"
       "SZQGPQYQSZQGPQYQSZQGPQYQS\n")
AWS = ("[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
       "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
KUBE_KEY = ("apiVersion: v1\nkind: Config\nclusters: []\nusers:\n- name: admin\n  user:\n"
            "    client-certificate-data: " + base64.b64encode(os.urandom(90)).decode() + "\n"
            "    client-key-data: " + base64.b64encode(RSA_PEM.encode()).decode() + "\n")
KUBE_TOKEN = ("apiVersion: v1\nkind: Config\nusers:\n- name: ci\n  user:\n"
              "    token: eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJjaSJ9.c2lnbmF0dXJl\n")
GCP = json.dumps({"type": "service_account", "project_id": "demo", "private_key_id": "0a1b",
                  "private_key": P8, "client_email": "bot@demo.iam.gserviceaccount.com"},
                 indent=2)
PUTTY = ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: me\nPublic-Lines: 2\n"
         "AAAAC3NzaC1lZDI1NTE5AAAAIB\nxyz\nPrivate-Lines: 1\nAAAAIGq3\nPrivate-MAC: 7a\n")

SECRETS = {
    "rsa": (RSA_PEM, "an RSA private key"),
    "rsa-encrypted": (RSA_ENCRYPTED, "an RSA private key"),
    "pkcs8-encrypted": (PKCS8_ENCRYPTED, "an encrypted private key"),
    "openssh": (OPENSSH, "an OpenSSH private key"),
    "p8": (P8, "a private key (PEM)"),
    "sec1": (SEC1, "an EC private key"),
    "bare-body": (BODY, "the body of a private key"),
    "pgp": (PGP, "a PGP private key block"),
    "age": (AGE, "an age secret key"),
    "aws": (AWS, "AWS credentials"),
    "aws-env": ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
                "AWS credentials"),
    "aws-json": ('{"AccessKey": {"UserName": "me", "AccessKeyId": "AKIAIOSFODNN7EXAMPLE", '
                 '"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}}',
                 "AWS credentials"),
    "kubeconfig-key": (KUBE_KEY, "a Kubernetes client key"),
    "kubeconfig-token": (KUBE_TOKEN, "a kubeconfig with a user's token"),
    "gcp": (GCP, "a Google Cloud service-account key"),
    "putty": (PUTTY, "a PuTTY private key"),
    "netrc": ("machine github.com login me password ghp_abcdefghijklmnop\n", "a .netrc login"),
}

# The same secrets spelled the ways a copy can be: CRLF, a byte-order mark, any case, the
# armor line broken across lines, flattened onto one line, quoted in Markdown, inside YAML,
# or a JSON string with \u escapes.
VARIANTS = {
    "crlf": RSA_PEM.replace("\n", "\r\n"),
    "bom": "\ufeff" + OPENSSH,
    "lowercase": RSA_PEM.lower(),
    "armor-split": RSA_PEM.replace("RSA PRIVATE KEY-----", "RSA\r\n PRIVATE\tKEY-----", 1),
    "one-line": RSA_PEM.replace("\n", " "),
    "markdown-quote": "Backup of my key:\n\n" + "\n".join("> " + ln for ln in OPENSSH.splitlines()),
    "markdown-fence": "# Server notes\n\nThe deploy key:\n\n```\n" + P8 + "```\n\nThat's it.\n",
    "yaml-block": "tls:\n  key: |\n" + "".join("    " + ln + "\n" for ln in SEC1.splitlines()),
    "json-escapes": json.dumps({"key": P8}).replace("BEGIN", "\\u0042EGIN"),
    "gcp-escapes": GCP.replace('"service_account"', '"\\u0073ervice_account"')
                      .replace("PRIVATE KEY", "PRIVATE\\u0020KEY"),
    "after-prose": "x = 1\n" * 5000 + AGE,
}

HARMLESS = {
    "public-key": PUBLIC,
    "about-the-format": "Keys start with -----BEGIN OPENSSH PRIVATE KEY----- and end with "
                        "-----END OPENSSH PRIVATE KEY-----.",
    "placeholder-body": "-----BEGIN RSA PRIVATE KEY-----\nyour key goes here, the whole of it "
                        "exactly as the console gave it to you\n-----END RSA PRIVATE KEY-----\n",
    "ellipsis-body": "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----\n",
    "aws-placeholder": "[default]\naws_secret_access_key = YOUR_SECRET_ACCESS_KEY\n",
    "kubeconfig-exec": "apiVersion: v1\nkind: Config\nusers:\n- name: eks\n  user:\n    exec:\n"
                       "      command: aws\n",
    "gcp-without-key": json.dumps({"type": "service_account", "client_email": "x@y"}),
    "certificate-chain": "-----BEGIN CERTIFICATE-----\n" + base64.b64encode(os.urandom(300))
                         .decode() + "\n-----END CERTIFICATE-----\n",
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_kind_of_secret_is_recognised_and_named(name):
    text, kind = SECRETS[name]
    found = secret_in(text)
    assert found is not None and found.startswith(kind), (name, found)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_spellings_of_a_copy_are_recognised(name):
    assert secret_in(VARIANTS[name]) is not None, name


@pytest.mark.parametrize("name", sorted(HARMLESS))
def test_text_about_keys_is_not_a_key(name):
    assert secret_in(HARMLESS[name]) is None, name


def test_the_project_own_sources_and_docs_are_not_secrets():
    root = Path(__file__).resolve().parent.parent
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md")),
                 *sorted((root / "jarvis" / "security").glob("*.py"))]:
        assert secret_in(path.read_text("utf-8")) is None, path


def _run(tool, **arguments):
    return ToolExecutor([tool], default_timeout=10).execute(
        ToolCall("c", tool.spec.name, json.dumps(arguments)))


@pytest.mark.parametrize("name", ["notes.txt", "README", "cluster.yaml", "backup.md",
                                  "data.json", "x", "mykey.pub", "deploy key.txt"])
def test_file_read_refuses_a_key_under_any_name(tmp_path: Path, name: str):
    (tmp_path / name).write_text(OPENSSH)
    out = _run(FileReadTool(allowed_dirs=[str(tmp_path)]), path=str(tmp_path / name))
    assert not out.success and out.error_type is ErrorType.DENIED
    assert "looks like an OpenSSH private key" in out.content
    assert "secrets are never read" in out.content
    assert "allowed_secret_paths in [tools.file_read]" in out.content
    assert BODY.splitlines()[0] not in out.content


@pytest.mark.parametrize("name", sorted({**SECRETS, **VARIANTS}))
def test_file_read_refuses_every_kind_and_spelling(tmp_path: Path, name: str):
    text = {**{k: v[0] for k, v in SECRETS.items()}, **VARIANTS}[name]
    (tmp_path / "notes.txt").write_bytes(text.encode("utf-8"))
    out = _run(FileReadTool(allowed_dirs=[str(tmp_path)]), path=str(tmp_path / "notes.txt"))
    assert not out.success and out.error_type is ErrorType.DENIED, (name, out.content[:200])


def test_the_check_sees_the_whole_file_not_only_the_lines_asked_for(tmp_path: Path):
    """max_lines=1 of a file whose key sits near the end of the 1 MiB that is read: the check
    sees every byte read (what could be returned with another max_lines)."""
    padding = "harmless line\n" * ((MAX_FILE_BYTES - 4096) // 14)
    (tmp_path / "log.txt").write_text(padding + RSA_PEM)
    assert (tmp_path / "log.txt").stat().st_size <= MAX_FILE_BYTES
    out = _run(FileReadTool(allowed_dirs=[str(tmp_path)]), path=str(tmp_path / "log.txt"),
               max_lines=1)
    assert not out.success and "an RSA private key" in out.content


def test_a_key_past_the_size_limit_is_not_read_at_all(tmp_path: Path):
    (tmp_path / "big.txt").write_text("x" * MAX_FILE_BYTES + "\n" + RSA_PEM)
    out = _run(FileReadTool(allowed_dirs=[str(tmp_path)]), path=str(tmp_path / "big.txt"))
    assert not out.success and "the limit is" in out.content and "MII" not in out.content


def test_a_harmless_file_reads_as_before(tmp_path: Path):
    (tmp_path / "notes.md").write_text(HARMLESS["placeholder-body"])
    out = _run(FileReadTool(allowed_dirs=[str(tmp_path)]), path=str(tmp_path / "notes.md"))
    assert out.success and out.content == HARMLESS["placeholder-body"]


def test_a_key_the_user_named_in_allowed_secret_paths_may_be_read(tmp_path: Path):
    (tmp_path / "deploy.txt").write_text(RSA_PEM)
    tool = FileReadTool(allowed_dirs=[str(tmp_path)],
                        allowed_secret_paths=[str(tmp_path / "deploy.txt")])
    out = _run(tool, path=str(tmp_path / "deploy.txt"))
    assert out.success and out.content == RSA_PEM


def _cli(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL, cwd=cwd)


def test_jarvis_ask_never_hands_a_renamed_key_to_the_model(tmp_path: Path, cli_env):
    """End to end: the model asks for notes.txt (a copied SSH key) and a kubeconfig saved as
    cluster.yaml; what goes back to it is the refusal, never the content."""
    from jarvis.testing import FakeOpenAIServer, reply, tool_call

    work = tmp_path / "ws"
    work.mkdir()
    (work / "config.toml").write_text("")
    (work / "notes.txt").write_text(OPENSSH.replace("\n", "\r\n"))
    (work / "cluster.yaml").write_text(KUBE_TOKEN)
    script = [reply(tool_calls=[tool_call("file_read", {"path": "notes.txt"}),
                                tool_call("file_read", {"path": "cluster.yaml"})]),
              "I could not read them."]
    env = {**cli_env, "JARVIS_ENGINE": "vllm", "JARVIS_MODEL": "test-model"}
    with FakeOpenAIServer(script) as model:
        env["VLLM_HOST"] = model.url
        out = _cli(env, "ask", "--tools", "file_read", "Show me my notes", cwd=work)
    assert out.returncode == 0, out.stderr
    sent = json.dumps(model.requests)
    tool_messages = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert "looks like an OpenSSH private key" in tool_messages[0]
    assert "looks like a kubeconfig" in tool_messages[1]
    assert BODY.splitlines()[1] not in sent and "eyJzdWIiOiJjaSJ9" not in sent


def test_memory_index_skips_keys_says_so_and_drops_an_older_copy(tmp_path: Path, cli_env):
    """`jarvis memory index FOLDER`: a key saved under an innocent name is not indexed, the
    summary counts it, memory_search cannot find it, and a copy indexed before the key was
    pasted in (or by an older jarvis) leaves memory."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("buy milk\n")
    (notes / "server.md").write_text("the server notes: nothing secret yet\n")
    first = _cli(cli_env, "memory", "index", str(notes), "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["indexed"] == 2
    (notes / "server.md").write_text("the server notes\n\n" + RSA_PEM)
    (notes / "aws.txt").write_text(AWS.replace("\n", "\r\n"))
    again = _cli(cli_env, "memory", "index", str(notes), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert ("2 skipped because the content looks like a private key or credentials"
            in again.stdout), again.stdout
    assert "1 removed" in again.stdout
    found = _cli(cli_env, "memory", "search", "server notes", "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert "PRIVATE KEY" not in found.stdout and "server.md" not in found.stdout
    for word in ("wJalrXUtnFEMI", "aws_secret_access_key"):
        hit = _cli(cli_env, "memory", "search", word, "--json", cwd=tmp_path)
        assert "EXAMPLEKEY" not in hit.stdout


def test_the_memory_index_tool_skips_keys_too(tmp_path: Path):
    from jarvis.memory.sqlite import SQLiteMemory
    from jarvis.tools.memory_tools import MemoryIndexTool

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("plain words\n")
    (tmp_path / "docs" / "b.txt").write_text(GCP)
    memory = SQLiteMemory(tmp_path / "m.db")
    try:
        tool = MemoryIndexTool(backend=memory, allowed_dirs=[str(tmp_path / "docs")])
        out = ToolExecutor([tool], approver=lambda spec, args: True).execute(
            ToolCall("c", "memory_index", json.dumps({"path": str(tmp_path / "docs")})))
        assert out.success, out.content
        assert "Indexed 1 file" in out.content
        assert "1 skipped because the content looks like a private key" in out.content
        assert not memory.retrieve("service_account")
    finally:
        memory.close()


def test_mcp_read_resource_refuses_a_file_resource_holding_a_key(tmp_path: Path):
    """A filesystem server reads the host file for jarvis: its text is checked as file_read
    checks it (the whole text, not only the max_chars shown)."""
    from mcp_support import write_config

    from jarvis.core.config import load_config
    from jarvis.mcp.adapter import McpReadResourceTool
    from jarvis.mcp.manager import McpManager

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "plain.txt").write_text("just words")
    (tmp_path / "docs" / "notes.txt").write_text("notes\n" * 100 + AGE)
    # Sandboxed (the default), the server sees only the folder it is given.
    path = write_config(tmp_path, {"files": {"command": sys.executable,
                                             "args": [str(FILES_SERVER)],
                                             "read_only_paths": ["docs"]}},
                        extra='[tools.file_read]\nallowed_dirs = ["docs"]\n')
    manager = McpManager(load_config(path))
    try:
        tool = McpReadResourceTool(manager=manager)
        plain = tool.execute(server="files", uri=f"file://{tmp_path}/docs/plain.txt")
        assert plain.success and plain.content == "just words", plain.content
        out = tool.execute(server="files", uri=f"file://{tmp_path}/docs/notes.txt", max_chars=10)
        assert not out.success and out.error_type is ErrorType.DENIED
        assert "looks like an age secret key" in out.content and "AGE-SECRET" not in out.content
    finally:
        manager.close()
