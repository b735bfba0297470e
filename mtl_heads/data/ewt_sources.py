"""The sources of the five-layer EWT corpus: the three repositories of :data:`REPOS` at their pinned
commits, taken from a folder or downloaded as GitHub archives into the cache, and checked against
pinned content digests.

GitHub generates its archives on request and does not promise the same bytes twice, so no archive
digest is pinned. What is pinned is the content each build reads (:data:`DIGESTS`): per repository,
the SHA-256 of the sorted lines ``<repo-relative path>\\0<sha256 of the file>\\n`` over
:func:`~mtl_heads.data.ewt_build.source_files` (:func:`content_digest`). A full clone at the pinned
commit and ``../shared/data/ewt-sources`` (which keeps only those files) give the same digests.
After moving a pinned commit, recompute them from a folder holding the three repositories::

    python -m mtl_heads.data.ewt_sources ../shared/data/ewt-sources

(``tests/test_ewt_sources.py`` recomputes them from ``../shared/data/ewt-sources`` too.)

The cache (``$MTL_HEADS_CACHE/ewt-sources``) holds per repository ``<folder>-<commit>.tar.gz``,
the archive, and ``<folder>-<commit>/``, the files of it that the build reads. Both are written
under a temporary name in the same folder and renamed into place only once the files matched, so
an interrupted or rejected download leaves nothing that a later call would take for good; a later
call reuses them (and checks the files again: it is cheap next to a build).
"""
from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Callable

from mtl_heads.data.errors import DataError, MissingDataError
from mtl_heads.data.corpus import small_corpus_command
from mtl_heads.data.ewt_align import REPOS, source_files
from mtl_heads.files import file_sha256
from mtl_heads.progress import BYTES, progress_bar

# Content digests of the files the build reads, per REPOS key, at the pinned commits (see above).
DIGESTS = {
    "propbank": "febe631b75ba69dec8ad1acfe5a6e69779f7e2b023f37ef1771d7284c4afd658",  # 1149 files
    "ud": "5fe7d90936e7dd390c5451d6d9d4391359c655949604c7efd3c49d6b55995576",  # 1178 files
    "uner": "1b24aafef02dde285509f0b51c256ecca78bfe2592a7b5d009baf0343fd4a22f",  # 4 files
}
ARCHIVE_URL = "https://codeload.github.com/{github}/tar.gz/{commit}"
TIMEOUT = 60  # seconds without a byte before a download gives up
CHUNK = 1 << 20


def offline_hint() -> str:
    """What to do when the sources cannot be downloaded: a folder of clones, or the small real corpus."""
    return ("build without a network from a folder holding propbank-release, UD_English-EWT and UNER_English-EWT "
            "(git clones at the pinned commits): sources=<folder>; or, to try the pipeline on real text, a small "
            f"corpus (67 sentences, from the tests' excerpts of the sources): {small_corpus_command()}")


def content_digest(name: str, root: Path) -> str:
    """The content digest of the repository ``name`` (a :data:`REPOS` key) in the folder ``root``:
    SHA-256 of the sorted lines ``<path>\\0<sha256 of the file>\\n`` over ``source_files(name, root)``.
    A listed file that is missing is a MissingDataError naming it."""
    lines = []
    for rel in source_files(name, root):
        try:
            lines.append(f"{rel}\0{file_sha256(root / rel)}\n")
        except FileNotFoundError:
            raise MissingDataError(f"{root / rel}: no such file; the build of the EWT corpus reads it") from None
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


def folder_sources(folder: Path, check: bool = True, digests: dict[str, str] | None = None,
                   warn: Callable[[str], object] = print) -> dict[str, Path]:
    """The three repositories in ``folder`` (sub-folders named as :data:`REPOS` says, as in
    ``../shared/data/ewt-sources`` or git clones), by key, each checked against ``digests``
    (default :data:`DIGESTS`): a mismatch is a DataError, or with ``check=False`` a line to ``warn``."""
    digests = digests or DIGESTS
    roots = {key: folder / repo.folder for key, repo in REPOS.items()}
    missing = [root.name for root in roots.values() if not root.is_dir()]
    if missing:
        raise MissingDataError(f"{folder}: no folder {', '.join(missing)}; expected "
                               f"{', '.join(r.folder for r in REPOS.values())} (as in ../shared/data/ewt-sources, "
                               f"or git clones of {', '.join(r.github for r in REPOS.values())})")
    for key, root in roots.items():
        wrong = what_differs(key, root, digests[key])
        if wrong and check:
            raise DataError(f"{root}: {wrong} (check=false builds from them anyway)")
        if wrong:
            warn(f"warning: {root}: {wrong}; building from them anyway (check=false)")
    return roots


def what_differs(key: str, root: Path, digest: str) -> str | None:
    """None when the files of ``root`` that the build reads match ``digest``, else what is wrong."""
    repo = REPOS[key]
    missing = [rel for rel in source_files(key, root) if not (root / rel).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"{missing[0]}{more} is missing, which the build reads"
    got = content_digest(key, root)
    if got == digest:
        return None
    return (f"the files the build reads are not those of {repo.github} at {repo.commit[:12]} "
            f"(content digest {got[:16]}..., pinned {digest[:16]}...)")


def archive_urls() -> dict[str, str]:
    """GitHub's tar.gz archive URL of each repository at its pinned commit, by key."""
    return {key: ARCHIVE_URL.format(github=r.github, commit=r.commit) for key, r in REPOS.items()}


def download_sources(cache: Path, urls: dict[str, str] | None = None, digests: dict[str, str] | None = None,
                     progress: bool = True, log: Callable[[str], object] = print) -> dict[str, Path]:
    """The three repositories' folders in ``cache``, by key: reused when there and matching,
    else from the cached archive, else downloaded (see the module's docstring).

    Args:
        cache: the folder of archives and their files (created when absent).
        urls: the archive of each repository (default :func:`archive_urls`).
        digests: the content digest each must have (default :data:`DIGESTS`).
        progress: a progress bar per download on stderr (on a terminal; a few plain lines in a log).
        log: where the lines saying what is done go.
    """
    urls, digests = urls or archive_urls(), digests or DIGESTS
    cache.mkdir(parents=True, exist_ok=True)
    return {key: fetch(key, urls[key], digests[key], cache, progress, log) for key in REPOS}


def fetch(key: str, url: str, digest: str, cache: Path, progress: bool, log: Callable[[str], object]) -> Path:
    """One repository's folder in ``cache`` (see :func:`download_sources`)."""
    repo = REPOS[key]
    final = cache / f"{repo.folder}-{repo.commit}"
    archive = cache / f"{final.name}.tar.gz"
    if final.is_dir() and not what_differs(key, final, digest):
        log(f"{repo.folder}: cached in {final}")
        return final
    if archive.is_file():
        log(f"{repo.folder}: unpacking the cached {archive}")
        part = archive
    else:
        part = download(url, cache, repo.folder, progress, log)
    with tempfile.TemporaryDirectory(prefix=f".{final.name}.", dir=cache) as tmp:
        try:
            kept = keep_sources(key, unpack(part, Path(tmp) / "all", url), Path(tmp) / "kept")
            wrong = what_differs(key, kept, digest)
            if wrong:
                raise DataError(f"{url}: {wrong}; the archive is not kept")
        except DataError:
            part.unlink(missing_ok=True)  # a bad archive, downloaded now or cached earlier
            raise
        except BaseException:
            if part != archive:
                part.unlink(missing_ok=True)
            raise
        if part != archive:
            os.replace(part, archive)
        if final.exists():  # an earlier copy whose files no longer match
            shutil.rmtree(final)
        os.replace(kept, final)
    log(f"{repo.folder}: {final}")
    return final


def download(url: str, folder: Path, label: str, progress: bool, log: Callable[[str], object]) -> Path:
    """``url`` into a new temporary file in ``folder``, removed again on any failure; its path
    (``label``: the progress bar's).
    Offline, refused, an HTTP error or a broken transfer is a DataError naming the URL."""
    log(f"downloading {url}")
    fd, name = tempfile.mkstemp(prefix=".download-", suffix=".part", dir=folder)
    part = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            size = int(response.headers.get("Content-Length") or 0) or None  # GitHub's archives: often unknown
            with progress_bar(total=size, unit=BYTES, desc=label, disable=not progress, file=sys.stderr) as bar:
                got = 0
                while block := response.read(CHUNK):
                    out.write(block)
                    got += len(block)
                    bar.update(len(block))
            if size is not None and got < size:  # read(n) returns b"" where the connection closed
                raise DataError(f"{url}: cannot download it (the transfer broke off after {got} of {size} bytes); "
                                f"try again, or {offline_hint()}")
    except urllib.error.HTTPError as err:
        part.unlink(missing_ok=True)
        raise DataError(f"{url}: cannot download it (HTTP {err.code} {err.reason}); {offline_hint()}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
        part.unlink(missing_ok=True)
        reason = getattr(err, "reason", None) or err
        raise DataError(f"{url}: cannot download it ({reason}; offline?); {offline_hint()}") from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return part


def unpack(archive: Path, into: Path, url: str) -> Path:
    """Extract the tar.gz ``archive`` into the new folder ``into`` (members that would land outside
    it, links included, are refused); the one folder it holds (``<name>-<commit>/`` on GitHub)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise DataError(f"{url}: the archive cannot be unpacked ({type(err).__name__}: {err})") from None
    tops = sorted(into.iterdir()) if into.is_dir() else []
    if len(tops) != 1 or not tops[0].is_dir():
        raise DataError(f"{url}: expected one folder in the archive, found {', '.join(p.name for p in tops) or 'nothing'}")
    return tops[0]


def keep_sources(key: str, root: Path, kept: Path) -> Path:
    """Move the files the build reads from ``root`` into the new folder ``kept`` (same relative
    paths); ``kept``. A listed file that is missing stays missing (the digest then says so)."""
    kept.mkdir()
    for rel in source_files(key, root):
        if (root / rel).is_file():
            (kept / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(root / rel, kept / rel)
    return kept


if __name__ == "__main__":  # the digests to pin, from a folder holding the three repositories
    sources = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/ewt-sources")
    for name, repository in REPOS.items():
        print(f'    "{name}": "{content_digest(name, sources / repository.folder)}",  # {repository.folder}')
