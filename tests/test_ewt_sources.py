"""Where the EWT corpus comes from: its sources (a folder, or archives downloaded from a local HTTP
server standing in for GitHub), the pinned content digests, ``python -m mtl_heads ewt`` end to
end, and where ``data=ewt`` finds the corpus."""
from __future__ import annotations

import http.server
import io
import re
import shutil
import socket
import tarfile
import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers import REPO
from mtl_heads import config
from mtl_heads.commands import ewt as ewt_command
from mtl_heads.config import ConfigError, load_config
from mtl_heads.data import corpus, ewt_sources
from mtl_heads.data.corpus import load_corpus
from mtl_heads.data.errors import DataError, MissingDataError
from mtl_heads.data.ewt_align import REPOS, source_files
from mtl_heads.data.ewt_sources import DIGESTS, content_digest, download_sources, folder_sources

FIXTURES = REPO / "tests" / "fixtures" / "ewt-sources"


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """No test reaches GitHub or the user's cache, whatever it calls."""
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "user-cache"))
    monkeypatch.setattr(ewt_sources, "archive_urls", lambda: {k: f"http://127.0.0.1:{closed_port()}/{k}" for k in REPOS})


@pytest.fixture(scope="module")
def sources() -> Path:
    """The three repositories' excerpt (tests/fixtures/ewt-sources)."""
    if not FIXTURES.is_dir():
        pytest.skip("tests/fixtures/ewt-sources is absent")
    return FIXTURES


@pytest.fixture(scope="module")
def digests(sources) -> dict[str, str]:
    return {key: content_digest(key, sources / repo.folder) for key, repo in REPOS.items()}


def archive(folder: Path, top: str) -> bytes:
    """``folder`` as a tar.gz holding ``top/``, as GitHub's archives hold ``<name>-<commit>/``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=top)
    return buffer.getvalue()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.hits.append(self.path)
        body = self.server.files.get(self.path.removesuffix("/cut"))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body) + (1000 if self.path.endswith("/cut") else 0)))
        self.end_headers()
        self.wfile.write(body)  # "/cut": the connection closes short of the length announced

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(sources):
    """A local HTTP server with each repository's archive at ``/<github>/tar.gz/<commit>``."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.files = {f"/{r.github}/tar.gz/{r.commit}": archive(sources / r.folder, f"{r.folder}-{r.commit}")
                   for r in REPOS.values()}
    httpd.hits = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def urls(server, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    server.hits.clear()
    return {key: f"http://127.0.0.1:{server.server_port}/{r.github}/tar.gz/{r.commit}" for key, r in REPOS.items()}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def kept() -> list[str]:
    """What a cache holds once every download succeeded: each archive and its files."""
    return sorted(f"{r.folder}-{r.commit}{ext}" for r in REPOS.values() for ext in ("", ".tar.gz"))


# --- downloads ----------------------------------------------------------------------------------
def test_download_checks_the_files_and_reuses_the_cache(tmp_path, sources, digests, urls, server, capfd):
    cache, lines = tmp_path / "cache", []
    roots = download_sources(cache, urls, digests, progress=True, log=lines.append)
    assert listing(cache) == kept()  # no temporary file or folder left
    for key, repo in REPOS.items():
        assert roots[key] == cache / f"{repo.folder}-{repo.commit}"
        assert content_digest(key, roots[key]) == digests[key]
        read = [rel for rel in source_files(key, sources / repo.folder) if (sources / repo.folder / rel).is_file()]
        assert sorted(p.relative_to(roots[key]).as_posix() for p in roots[key].rglob("*") if p.is_file()) == read
    assert len(server.hits) == 3 and [line for line in lines if line.startswith("downloading")] == \
        [f"downloading {urls[k]}" for k in REPOS]
    out, err = capfd.readouterr()
    assert "\r" not in out + err  # stderr is no terminal here: no progress bar in a log

    lines.clear()
    assert download_sources(cache, urls, digests, log=lines.append) == roots  # the files reused
    assert len(server.hits) == 3 and all("cached in" in line for line in lines)
    shutil.rmtree(roots["ud"])
    (roots["uner"] / "README.md").write_text("edited\n")
    assert download_sources(cache, urls, digests, log=lines.append) == roots  # from the cached archives
    assert len(server.hits) == 3 and content_digest("uner", roots["uner"]) == digests["uner"]
    assert listing(cache) == kept()


def test_files_that_do_not_match_are_rejected_and_not_kept(tmp_path, digests, urls):
    cache = tmp_path / "cache"
    wrong = {**digests, "ud": "0" * 64}
    with pytest.raises(DataError, match=rf"^{urls['ud']}: the files the build reads are not those of "
                                        r"UniversalDependencies/UD_English-EWT at 15d613d8447b .*not kept"):
        download_sources(cache, urls, wrong)
    propbank = f"{REPOS['propbank'].folder}-{REPOS['propbank'].commit}"
    assert listing(cache) == [propbank, f"{propbank}.tar.gz"]  # the repository before it, nothing of UD


def test_http_error_and_offline_name_the_url_and_the_way_without_a_network(tmp_path, digests, urls):
    cache = tmp_path / "cache"
    missing = {**urls, "propbank": urls["propbank"] + "0"}
    with pytest.raises(DataError) as err:
        download_sources(cache, missing, digests)
    assert str(err.value).startswith(f"{missing['propbank']}: cannot download it (HTTP 404 Not Found); ")
    assert "sources=<folder>" in str(err.value) and "\n" not in str(err.value)
    assert "../shared" not in str(err.value) and corpus.small_corpus_command() in str(err.value)
    offline = {key: f"http://127.0.0.1:{closed_port()}/archive.tar.gz" for key in REPOS}
    with pytest.raises(DataError, match=r"^http://127\.0\.0\.1:\d+/archive\.tar\.gz: cannot download it "
                                        r"\(.*refused; offline\?\); build without a network .* sources="):
        download_sources(cache, offline, digests)
    assert listing(cache) == []


def test_a_broken_transfer_leaves_nothing(tmp_path, digests, urls):
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="cannot download it"):
        download_sources(cache, {**urls, "propbank": urls["propbank"] + "/cut"}, digests)
    assert listing(cache) == []


def test_a_cached_archive_that_no_longer_matches_is_removed(tmp_path, digests, urls):
    cache = tmp_path / "cache"
    roots = download_sources(cache, urls, digests)
    shutil.rmtree(roots["uner"])
    name = f"{REPOS['uner'].folder}-{REPOS['uner'].commit}"
    (cache / f"{name}.tar.gz").write_bytes(b"not a tar.gz")
    with pytest.raises(DataError, match=rf"^{urls['uner']}: the archive cannot be unpacked"):
        download_sources(cache, urls, digests)
    assert name not in listing(cache) and f"{name}.tar.gz" not in listing(cache)
    assert download_sources(cache, urls, digests) == roots  # downloaded again


# --- a sources folder ---------------------------------------------------------------------------
def test_a_sources_folder_is_checked(tmp_path, sources, digests):
    assert folder_sources(sources, digests=digests) == {k: sources / r.folder for k, r in REPOS.items()}
    copy = tmp_path / "sources"
    shutil.copytree(sources, copy)
    (copy / "UNER_English-EWT" / "README.md").write_text("a newer clone\n")
    with pytest.raises(DataError, match=r"UNER_English-EWT: the files the build reads are not those of "
                                        r"UniversalNER/UNER_English-EWT at 8ed072de2fd2 .*check=false"):
        folder_sources(copy, digests=digests)
    warnings = []
    assert folder_sources(copy, check=False, digests=digests, warn=warnings.append)["uner"] == copy / "UNER_English-EWT"
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {copy / 'UNER_English-EWT'}: ")
    (copy / "UNER_English-EWT" / "en_ewt-ud-test.iob2").unlink()
    with pytest.raises(DataError, match=r"en_ewt-ud-test.iob2 is missing, which the build reads"):
        folder_sources(copy, digests=digests)
    shutil.rmtree(copy / "UD_English-EWT")
    with pytest.raises(MissingDataError, match=r"no folder UD_English-EWT; expected propbank-release"):
        folder_sources(copy, digests=digests)


def test_the_pinned_digests_are_those_of_the_shared_sources(ewt_sources_dir):
    """How the pins were made (and are remade: python -m mtl_heads.data.ewt_sources <folder>)."""
    assert {key: content_digest(key, ewt_sources_dir / repo.folder) for key, repo in REPOS.items()} == DIGESTS


# --- the command --------------------------------------------------------------------------------
def build(argv, capsys):
    code = ewt_command.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_command_builds_from_a_sources_folder(tmp_path, sources, digests, monkeypatch, capsys):
    monkeypatch.setattr(ewt_sources, "DIGESTS", digests)
    out = tmp_path / "data" / "ewt"
    code, printed, err = build([f"out={out}", f"sources={sources}"], capsys)
    assert code == 0, err
    assert (out / "en_ewt.dev.gold_conll").is_file() and (out / "en_ewt.dev.conllu").is_file()
    assert printed.splitlines()[-1].startswith(f"built {out} in ") and err == ""
    assert listing(out.parent) == ["ewt"]  # no temporary folder left

    before = sorted(p.name for p in out.iterdir())
    code, _, err = build([f"out={out}", f"sources={sources}"], capsys)
    assert code == 2 and err == f"error: config key 'out': {out} is not empty; force=true replaces it once the " \
                                "new corpus is built, or choose another folder\n"
    (out / "stale.txt").write_text("from an earlier build\n")
    assert build([f"out={out}", f"sources={sources}", "force=true"], capsys)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == before and listing(out.parent) == ["ewt"]


def test_command_refuses_sources_that_differ_unless_check_false(tmp_path, sources, capsys):
    out = tmp_path / "ewt"
    code, _, err = build([f"out={out}", f"sources={sources}"], capsys)  # the excerpt is not the pinned content
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {sources / 'propbank-release'}: ")
    assert not out.exists() and listing(tmp_path) == []
    code, printed, err = build([f"out={out}", f"sources={sources}", "check=false"], capsys)
    assert code == 0 and err.count("warning: ") == 3 and (out / "en_ewt.test.gold_conll").is_file()


def test_a_failed_build_writes_nothing(tmp_path, sources, digests, monkeypatch, capsys):
    monkeypatch.setattr(ewt_sources, "DIGESTS", digests)
    out = tmp_path / "ewt"
    out.mkdir()
    (out / "kept.txt").write_text("an earlier corpus\n")

    def fails(roots, into, log=print):
        (into / "en_ewt.train.gold_conll").write_text("half")
        raise DataError(f"{roots['ud']}/README.md:1: broken")

    monkeypatch.setattr(ewt_command, "build_corpus", fails)
    code, _, err = build([f"out={out}", f"sources={sources}", "force=true"], capsys)
    assert code == 2 and err.startswith("error: ") and err.endswith("README.md:1: broken\n")
    assert listing(tmp_path) == ["ewt"] and listing(out) == ["kept.txt"]


def test_command_downloads_into_the_cache(tmp_path, digests, urls, server, monkeypatch, capsys):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ewt_sources, "archive_urls", lambda: urls)
    monkeypatch.setattr(ewt_sources, "DIGESTS", digests)
    code, printed, err = build([f"out={tmp_path / 'ewt'}", "progress=true"], capsys)
    assert code == 0, err
    assert listing(tmp_path / "cache" / "ewt-sources") == kept()
    assert (tmp_path / "ewt" / "en_ewt.dev.conllu").is_file() and "\r" not in printed + err

    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "empty-cache"))  # and nothing listens
    monkeypatch.setattr(ewt_sources, "archive_urls", lambda: {k: f"http://127.0.0.1:{closed_port()}/x" for k in REPOS})
    code, _, err = build([f"out={tmp_path / 'other'}"], capsys)
    assert code == 2 and err.count("\n") == 1 and "offline?" in err and "sources=" in err
    assert err.rstrip().endswith(corpus.small_corpus_command()) and "../shared" not in err  # issue 53, item 10
    assert not (tmp_path / "other").exists()


def test_the_small_real_corpus_builds_offline(tmp_path, monkeypatch, capsys):
    """What the offline hint and the training guide promise: the tests' excerpts build a small real corpus
    that data=ewt reads (issue 53, item 10)."""
    monkeypatch.chdir(REPO)
    command = corpus.small_corpus_command()
    assert command == "python -m mtl_heads ewt sources=tests/fixtures/ewt-sources check=false"
    assert command in (REPO / "docs" / "guides" / "training.md").read_text()
    code, printed, err = build(command.split()[4:] + [f"out={tmp_path / 'ewt'}"], capsys)
    assert code == 0, err
    small = load_corpus(load_config(["data=ewt", f"data.path={tmp_path / 'ewt'}"]).data)
    assert {split: len(sentences) for split, sentences in small.items()} == {"train": 15, "dev": 35, "test": 17}


def test_command_help_and_bad_keys(capsys):
    code, printed, _ = build(["-h"], capsys)
    assert code == 0
    for key, default in (("out", "data/ewt"), ("sources", "empty"), ("check", "true"), ("force", "false"),
                         ("progress", "true")):
        assert f"  {key:<9} [{default}]  " in printed
    assert build(["outt=x"], capsys)[2] == ("error: unknown config key 'outt' (top level has: check, force, out, "
                                            "progress, sources)\n")
    assert build(["force=maybe"], capsys)[2] == "error: config key 'force': expected true or false, got 'maybe'\n"
    assert build(["data/ewt"], capsys)[2].startswith("error: argument 'data/ewt': expected key=value")
    code, _, err = build(["sources=/nonexistent/folder"], capsys)
    assert code == 2 and err.startswith("error: config key 'sources': /nonexistent/folder is not a folder")


# --- where data=ewt finds the corpus ------------------------------------------------------------
def test_data_ewt_takes_the_first_folder_holding_the_corpus(tmp_path, monkeypatch):
    first, second = tmp_path / "data" / "ewt", tmp_path / "shared"
    monkeypatch.setattr(config, "EWT_FOLDERS", (str(first), str(second)))
    assert load_config(["data=ewt"]).data.path is None
    with pytest.raises(ConfigError, match=r"^config key 'data.path': no EWT corpus in .*; build it from its public "
                                          rf"sources with `{re.escape(config.EWT_BUILD)}` \(offline, a small real "
                                          rf"corpus: `{re.escape(corpus.small_corpus_command())}`\)"):
        load_corpus(load_config(["data=ewt"]).data)
    for folder in (second, first):
        folder.mkdir(parents=True)
        (folder / "en_ewt.dev.gold_conll").write_text("")
    assert load_config(["data=ewt"]).data.path == str(first)
    shutil.rmtree(first)
    first.mkdir()  # a folder without the corpus is passed over
    cfg = load_config(["data=ewt"])
    assert cfg.data.path == str(second) and f"path: {second}\n" in OmegaConf.to_yaml(cfg)  # what config.yaml keeps
    assert load_config(["data=ewt", "data.path=elsewhere"]).data.path == "elsewhere"
    assert load_config(["data=conllu"]).data.path is None


def test_data_ewt_on_this_machine_records_the_path_the_study_recorded(ewt, monkeypatch):
    """The study's run folders say path: ../shared/data/ewt; a run here must say the same, or compare
    would split its settings (unless data/ewt has been built here, which then comes first)."""
    monkeypatch.chdir(REPO)
    if (REPO / "data" / "ewt").is_dir():
        pytest.skip("data/ewt has been built here")
    assert load_config(["data=ewt"]).data.path == "../shared/data/ewt"
    study = OmegaConf.load(REPO / "docs" / "ewt-study" / "pos" / "seed1" / "config.yaml")
    assert study.data.path == "../shared/data/ewt"
