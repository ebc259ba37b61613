"""`ragport sync folder`: a corpus kept equal to a folder across runs (PostgreSQL test server)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from fake_http import Reply

from ragport.cli import main


@pytest.fixture
def cli(pg_url, pg_schema, capsys):
    """Run the command line in-process against the test server; returns (exit code, stdout)."""
    base = ["--store", pg_url, "--schema", pg_schema, "--embedder", "hash"]
    assert main(["db", "upgrade", *base[:4]]) == 0  # db upgrade embeds nothing: no --embedder
    capsys.readouterr()

    def run(*args: str) -> tuple[int, str]:
        code = main([*args, *base])
        captured = capsys.readouterr()
        run.err = captured.err
        return code, captured.out

    return run


def _sync(cli, root) -> dict:
    code, out = cli("sync", "folder", str(root), "--corpus", "notes", "--json")
    assert code == 0, out
    return json.loads(out)


def _hits(cli, text: str) -> list[str]:
    code, out = cli("query", text, "--corpus", "notes", "--json", "--lexical", "bm25")
    assert code == 0, cli.err
    return [h["source_id"] for h in json.loads(out)["hits"]]


def test_sync_folder_keeps_a_corpus_equal_to_the_folder(cli, tmp_path):
    """Added, edited, renamed and deleted files between runs; a second run embeds nothing.

    If this fails, check FolderConnector.changes and the sync subcommand in ragport/cli/sync.py.
    """
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# Alpha\n\nAardvarks dig burrows.\n")
    (root / "sub" / "b.txt").write_text("Baboons live in troops.\n")
    (root / "c.md").write_text("# Gamma\n\nCapybaras like water.\n")
    (root / ".hidden.md").write_text("# Hidden\n\nnever synced\n")
    (root / "blob.bin").write_bytes(b"\x00\x01")

    first = _sync(cli, root)
    assert (first["upserted"], first["bootstrapped"], first["exhausted"]) == (3, True, True)
    second = _sync(cli, root)
    assert (second["upserted"], second["deleted"], second["bootstrapped"]) == (0, 0, False)
    assert "sub/b.txt" in _hits(cli, "baboons troops")

    (root / "a.md").write_text("# Alpha\n\nAardvarks eat termites at night.\n")
    shutil.move(root / "c.md", root / "d.md")
    (root / "sub" / "b.txt").unlink()
    (root / "e.md").write_text("# Epsilon\n\nEchidnas lay eggs.\n")
    third = _sync(cli, root)
    assert (third["upserted"], third["deleted"]) == (3, 2)
    assert "sub/b.txt" not in _hits(cli, "baboons troops")
    assert "d.md" in _hits(cli, "capybaras water")
    assert "c.md" not in _hits(cli, "capybaras water")
    assert "a.md" in _hits(cli, "termites")

    code, out = cli("sync", "folder", str(root), "--corpus", "notes")
    assert code == 0 and "0 upserted" in out


def test_sync_folder_into_an_ingested_corpus_adopts_it(cli, tmp_path, monkeypatch):
    """Files ingested, then deleted and renamed before the first sync: the sync retires them
    (the same ids: paths under the folder), so they are not searchable for ever."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nAardvarks dig burrows.\n")
    (root / "b.md").write_text("# Beta\n\nBaboons live in troops.\n")
    (root / "c.md").write_text("# Gamma\n\nCapybaras like water.\n")
    code, _ = cli("ingest", str(root), "--root", str(root), "--corpus", "notes")
    assert code == 0, cli.err
    (root / "b.md").unlink()
    shutil.move(root / "c.md", root / "c2.md")
    first = _sync(cli, root)
    assert (first["upserted"], first["swept"]) == (1, 2), first
    assert "b.md" not in _hits(cli, "baboons troops")
    found = _hits(cli, "capybaras water")
    assert "c2.md" in found and "c.md" not in found
    assert "a.md" in _hits(cli, "aardvarks")


def test_sync_folder_names_each_failure_and_counts_what_still_fails(cli, tmp_path):
    """A file over --max-bytes and a broken PDF: each is named with its reason (text and
    JSON, which carries no internal cursor); the next run, with nothing new, still exits 1
    and names them."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nAardvarks dig burrows.\n")
    (root / "big.md").write_text("# Big\n\n" + "word " * 400)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf\n")
    code, out = cli(
        "sync", "folder", str(root), "--corpus", "notes", "--json", "--max-bytes", "1024"
    )
    shown = json.loads(out)
    assert code == 1 and "cursor" not in shown
    reasons = {f["source_id"]: f["reason"] for f in shown["failures"]}
    assert set(reasons) == {"big.md", "broken.pdf"} and shown["failed"] == 2
    assert reasons["big.md"] == "too_large"
    assert all("word" not in f["error"] for f in shown["failures"])  # no document text

    # the retry is due at once: the next run lists the folder again and both fail again
    code, out = cli("sync", "folder", str(root), "--corpus", "notes", "--max-bytes", "1024")
    assert code == 1 and "2 failed" in out and "big.md" in out and "broken.pdf" in out
    # the next retry waits a minute: the unchanged broken PDF is not read again, and the run
    # still names it and exits 1
    code, out = cli(
        "sync", "folder", str(root), "--corpus", "notes", "--json", "--max-bytes", "1024"
    )
    shown = json.loads(out)
    assert code == 1 and "broken.pdf" not in {f["source_id"] for f in shown["failures"]}
    assert {s["source_id"] for s in shown["still_failing"]} == {"big.md", "broken.pdf"}
    (root / "big.md").unlink()
    (root / "broken.pdf").unlink()
    code, out = cli("sync", "folder", str(root), "--corpus", "notes", "--json")
    assert code == 0 and json.loads(out)["still_failing"] == []


def test_sync_folder_of_a_missing_path_is_an_error(cli, tmp_path):
    """A folder that does not exist: exit 2 and a ValidationError line, nothing synced."""
    code, _ = cli("sync", "folder", str(tmp_path / "nope"), "--corpus", "notes")
    assert code == 2
    assert "ValidationError" in cli.err


def test_sync_drive_against_the_fake_server(cli, serve, monkeypatch):
    """`ragport sync drive --folder ID` with the token from the environment; a second run
    finds nothing to do; the token is never printed.

    If this fails, check _sync_drive in ragport/cli/sync.py and GoogleDriveConnector.
    """
    from fake_drive import DOC, FakeDrive

    drive = FakeDrive()
    drive.tokens = {"tok-SECRET-1"}
    team = drive.folder("Team")
    drive.add("Handbook", parent=team, mime=DOC, data=b"<h1>Handbook</h1><p>Okapis are shy.</p>")
    sub = drive.folder("Sub", parent=team)
    drive.add("notes.txt", parent=sub, data=b"Quokkas smile.\n")
    server = serve(drive)
    monkeypatch.setenv("RAGPORT_DRIVE_ACCESS_TOKEN", "tok-SECRET-1")
    args = ["sync", "drive", "--folder", team, "--corpus", "notes", "--base-url", server.url]
    code, out = cli(*args, "--allow-loopback", "--json")
    assert code == 0, cli.err
    first = json.loads(out)
    assert (first["upserted"], first["bootstrapped"]) == (2, True)
    assert "tok-SECRET-1" not in out + cli.err
    code, out = cli(*args, "--allow-loopback", "--json")
    assert json.loads(out)["upserted"] == 0
    assert "notes.txt" not in _hits(cli, "okapis shy")[:1]

    monkeypatch.delenv("RAGPORT_DRIVE_ACCESS_TOKEN")
    code, _ = cli(*args, "--allow-loopback")
    assert code == 2 and "RAGPORT_DRIVE_ACCESS_TOKEN" in cli.err
    monkeypatch.setenv("RAGPORT_DRIVE_ACCESS_TOKEN", "tok-SECRET-1")
    code, _ = cli(*args)
    assert code == 2 and "base_url" in cli.err, "plain http needs --allow-loopback"


def test_sync_folder_commits_pages_of_page_size_files(cli, tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(7):
        (root / f"n{i}.md").write_text(f"# N{i}\n\nnote {i}\n")
    code, out = cli("sync", "folder", str(root), "--corpus", "notes", "--json", "--page-size", "3")
    assert code == 0 and json.loads(out)["pages"] == 3
    code, _ = cli("sync", "folder", str(root), "--corpus", "notes", "--page-size", "0")
    assert code == 2


def _undecodable(root) -> str:
    """A file in ``root`` whose name is not UTF-8 (the byte 0xff); its name as Python has it."""
    name = os.fsdecode(b"bad\xff.md")
    with open(os.path.join(os.fsencode(root), b"bad\xff.md"), "wb") as file:
        file.write(b"# Bad name\n\nunreachable by any source id\n")
    return name


def test_sync_folder_reports_a_file_with_an_undecodable_name_as_failed(tmp_path, capsys):
    """A file whose name is not UTF-8 is failed (exit 1), named as `ragport ingest` names it
    (escaped: bad\\udcff.md), in the text and the JSON output; the other file is synced.

    If this fails, check FolderConnector.unlisted and _with_unlisted in ragport/cli/sync.py.
    """
    root = tmp_path / "notes"
    root.mkdir()
    (root / "ok.md").write_text("# Fine\n\nA fine note.\n")
    name = _undecodable(root)
    base = ["--store", "memory://", "--embedder", "hash", "--corpus", "notes"]
    assert main(["sync", "folder", str(root), *base, "--json"]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert (shown["upserted"], shown["failed"]) == (1, 1)
    (failure,) = shown["failures"]
    assert failure["source_id"] == name and failure["reason"] == "ValidationError"
    assert main(["sync", "folder", str(root), *base]) == 1
    out = capsys.readouterr().out
    assert "1 failed" in out and "  bad\\udcff.md  ValidationError" in out
    assert main(["ingest", str(root), *base]) == 1  # ingest names it the same way
    assert "bad\\udcff.md: FAILED" in capsys.readouterr().out


def test_sync_folder_names_an_undecodable_file_under_a_strict_terminal_encoding(
    tmp_path, monkeypatch
):
    """With stdout strictly UTF-8 (a desktop's en_US.UTF-8 locale), naming such a file is no
    UnicodeEncodeError: sync and ingest print the escaped name and exit 1.

    If this fails, check that escape_controls (ragport/cli/output.py) escapes lone surrogates.
    """
    import io
    import sys

    root = tmp_path / "notes"
    root.mkdir()
    _undecodable(root)
    for command in (["sync", "folder"], ["ingest"]):
        raw = io.BytesIO()
        stdout = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
        monkeypatch.setattr(sys, "stdout", stdout)
        code = main([*command, str(root), "--store", "memory://", "--embedder", "hash"])
        assert code == 1 and b"bad\\udcff.md" in raw.getvalue()


def test_sync_drive_stops_an_endless_listing_at_max_list_requests(serve, monkeypatch, capsys):
    """A Drive answering folder-only pages with a new token each time: `ragport sync drive
    --max-list-requests 30` stops with a LoadError naming the budget (exit 1), not a run that
    pages for ever; the help names the default.

    If this fails, check --max-list-requests in ragport/cli/sync.py (register) and _sync_drive.
    """
    from fake_drive import FOLDER, FakeDrive

    from ragport.adapters.connectors.drive import MAX_LIST_REQUESTS
    from ragport.cli import _iter_commands, _parser

    calls = []

    def endless(path, query, reply):
        if path != "/drive/v3/files":
            return reply
        calls.append(1)
        n = len(calls)
        folder = {"id": f"dir-{n}", "name": f"dir-{n}", "mimeType": FOLDER, "parents": ["x"]}
        return Reply(200, json.dumps({"files": [folder], "nextPageToken": f"t{n}"}).encode())

    drive = FakeDrive()
    drive.tamper = endless
    server = serve(drive)
    monkeypatch.setenv("RAGPORT_DRIVE_ACCESS_TOKEN", "token-1")
    argv = ["sync", "drive", "--store", "memory://", "--embedder", "hash", "--base-url",
            server.url, "--allow-loopback", "--max-list-requests", "30"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "ragport: LoadError: " in err and "max_list_requests=30" in err
    assert len(calls) == 28  # 30 minus the start-token and root look-ups
    helps = dict(_iter_commands(_parser()))
    assert str(MAX_LIST_REQUESTS) in helps["sync drive"].format_help()
