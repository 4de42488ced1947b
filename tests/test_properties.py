"""Property tests (hypothesis) for the readers of untrusted input: patches, archives, stack files, lock
files and a wheel's build info.

For every generated input: nothing is written outside the destination, only ``OrtstackError`` is
raised, and every message and tip is one line. The patch reader is also held to git: for trees git
itself diffs (odd names, links, renames, binary files), every name git reads is a name ortstack reads.
Each test states its ``max_examples``; ``GENERATED_CASES`` is their sum, the cases one ``nox -s test`` runs.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ortstack import config
from ortstack.build import buildinfo
from ortstack.errors import OrtstackError, UnsafeArchiveError
from ortstack.lockfile import Lock
from ortstack.patches import patchfile, patchpaths
from ortstack.source import archive
from test_config import FULL
from test_faults_patches import git_binary_literal
from test_faults_untrusted import DEFLATE64, GOOD_JSON, wheel_with
from upstream import GIT_ENV_FIXED

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

EXAMPLES = {
    "patch_reader": 60,
    "names_as_git_reads_them": 25,
    "tar_members": 150,
    "zip_members": 80,
    "damaged_archives": 100,
    "config_documents": 200,
    "config_text": 200,
    "config_nesting": 30,
    "lock_documents": 150,
    "lock_text": 150,
    "build_info_members": 150,
}
GENERATED_CASES = sum(EXAMPLES.values())


def cases(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """hypothesis settings for test ``name``: its stated examples, no deadline (a shared machine), no database."""
    return settings(
        max_examples=EXAMPLES[name],
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def assert_one_line(error: OrtstackError) -> None:
    for problem in error.problems():
        assert problem.message.strip(), problem
        assert not set(problem.message) & {"\n", "\r"}, repr(problem.message)
        assert problem.tip, f"no tip for: {problem.message}"
        assert not set(problem.tip) & {"\n", "\r"}, repr(problem.tip)


def tree_state(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root``: its kind and content (a link's target), links not followed."""
    state: dict[str, tuple[str, bytes]] = {}
    for folder, names, files in os.walk(root):
        for name in names + files:
            path = Path(folder, name)
            key = path.relative_to(root).as_posix()
            if path.is_symlink():
                state[key] = ("link", path.readlink().as_posix().encode())
            elif path.is_dir():
                state[key] = ("dir", b"")
            else:
                state[key] = ("file", path.read_bytes())
    return state


@pytest.fixture
def sandbox() -> Iterator[Path]:
    """A folder holding ``dest`` (where the input may write) and a precious file beside it."""
    with tempfile.TemporaryDirectory(prefix="ortstack-property-") as folder:
        root = Path(folder)
        (root / "dest").mkdir()
        (root / "outside.txt").write_text("precious\n")
        yield root


def assert_nothing_outside(sandbox: Path, before: dict[str, tuple[str, bytes]]) -> None:
    after = {k: v for k, v in tree_state(sandbox).items() if not (k == "dest" or k.startswith("dest/"))}
    assert after == before
    root = os.path.realpath(sandbox / "dest")
    for folder, names, files in os.walk(sandbox / "dest"):
        for name in names + files:
            path = Path(folder, name)
            if path.is_symlink():
                try:
                    resolved = os.path.realpath(path, strict=True)
                except (FileNotFoundError, NotADirectoryError):  # dangling: judge where it points
                    resolved = os.path.realpath(path)
                except OSError as error:
                    # A loop of links leads nowhere; resolved without strict, a loop such as b -> b/top reads as
                    # some other path (CPython joins the rest of the loop onto it), so it is told by ELOOP.
                    if error.errno != errno.ELOOP:
                        raise
                    continue
                assert os.path.commonpath([root, resolved]) == root, (path, path.readlink())


def outside_of_dest(sandbox: Path) -> dict[str, tuple[str, bytes]]:
    return {k: v for k, v in tree_state(sandbox).items() if not (k == "dest" or k.startswith("dest/"))}


# --------------------------------------------------------------------------------------------------
# Patches.

SEGMENTS = st.sampled_from(["a", "b", "src", "..", ".", ".git", ".GIT", "git~1", "sp ace", 'q"t', "tab\tx", "é", "c:"])
PATHS = st.lists(SEGMENTS, min_size=1, max_size=3).map("/".join) | st.sampled_from(["/abs", "\\\\x", "a\\..\\b"])
TARGETS = st.lists(st.sampled_from(["..", ".", "a", "b", "here", "/etc", "src"]), min_size=1, max_size=4).map("/".join)
HEADERS = st.sampled_from(["@@ -0,0 +1 @@", "@@ -0,0 +1,1 @@@", "@@ -0,0 +1 @@x", "@@ -0,0 +1,1 @@ f()", "@@ -1 +1"])


def quote(name: str) -> str:
    """``name`` the way git writes it: C-quoted when it holds a quote, a backslash, a control or non-ASCII byte."""
    raw = name.encode()
    if all(32 <= b < 127 and b not in b'"\\' for b in raw):
        return name
    escapes = {9: "\\t", 10: "\\n", 34: '\\"', 92: "\\\\"}
    return '"' + "".join(escapes.get(b, chr(b) if 32 <= b < 127 else f"\\{b:03o}") for b in raw) + '"'


def prefixed(prefix: str, name: str) -> str:
    quoted = quote(name)
    return f'"{prefix}{quoted[1:]}' if quoted.startswith('"') else f"{prefix}{name}"


@st.composite
def sections(draw: st.DrawFn) -> str:
    path = draw(PATHS)
    a, b = prefixed("a/", path), prefixed("b/", path)
    kind = draw(st.sampled_from(["file", "link", "binary-link", "rename", "delete"]))
    if kind == "rename":
        other = draw(PATHS)
        moves = f"similarity index 100%\nrename from {quote(path)}\nrename to {quote(other)}\n"
        return f"diff --git {a} {prefixed('b/', other)}\n{moves}"
    if kind == "delete":
        return f"diff --git {a} {b}\ndeleted file mode 100644\n--- {a}\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    if kind == "binary-link":
        target = draw(TARGETS).encode()
        return (
            f"diff --git {a} {b}\nnew file mode 120000\nindex {'0' * 40}..{git_blob_id(target)}\nGIT binary patch\n"
            f"{git_binary_literal(target)}\n{git_binary_literal(b'')}\n"
        )
    mode, body = ("100644", "hello") if kind == "file" else ("120000", draw(TARGETS))
    tail = "" if kind == "file" else "\\ No newline at end of file\n"
    return f"diff --git {a} {b}\nnew file mode {mode}\n--- /dev/null\n+++ {b}\n{draw(HEADERS)}\n+{body}\n{tail}"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def git_env(base_env: Mapping[str, str]) -> dict[str, str]:
    return {**base_env, **GIT_ENV_FIXED}


def git(args: list[str], cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, env=dict(env), capture_output=True, check=False)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, base_env: dict[str, str]) -> Path:
    """A repository with a few files (``a``, ``b``, ``src/x``, ``src/y``) committed: copied for each example."""
    repo = tmp_path_factory.mktemp("template")
    for name in ("a", "b", "src/x", "src/y"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x\n")
    env = git_env(base_env)
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "base"]):
        assert git(args, repo, env).returncode == 0
    return repo


@cases("patch_reader")
@given(diffs=st.lists(sections(), min_size=1, max_size=3))
def test_patch_reader_refuses_with_one_line_and_never_writes_outside(
    diffs: list[str], sandbox: Path, template: Path, base_env: dict[str, str]
) -> None:
    text = "".join(diffs)
    tree = sandbox / "dest"
    shutil.rmtree(tree)
    shutil.copytree(template, tree, symlinks=True)
    before = outside_of_dest(sandbox)
    hooks = sorted((tree / ".git" / "hooks").iterdir())
    env = git_env(base_env)
    try:
        patch = patchfile.split(text, "p.patch")
        patchfile.validate(patch, "p.patch", text=text, env=env, tip="fix it")
        (sandbox / "p.patch").write_text(text, encoding="utf-8")
        applied = git(["apply", "--index", str(sandbox / "p.patch")], tree, env)
        (sandbox / "p.patch").unlink()
        if applied.returncode == 0:
            patchpaths.check_links(tree, "p.patch", env)
    except OrtstackError as error:
        assert_one_line(error)
    else:
        assert_nothing_outside(sandbox, before)
    assert outside_of_dest(sandbox) == before
    assert sorted((tree / ".git" / "hooks").iterdir()) == hooks


NAME_CHARS = st.sampled_from(["a", "b", " ", '"', "\\", "\t", "é", "-", "=", ">", "{", "}", "x y"])
NAMES = st.lists(NAME_CHARS, min_size=1, max_size=6).map("".join).filter(lambda n: n.strip() == n)


@cases("names_as_git_reads_them")
@given(
    names=st.lists(NAMES, min_size=1, max_size=4, unique=True),
    kinds=st.lists(st.sampled_from(["file", "link", "binary", "rename"]), min_size=4, max_size=4),
)
def test_every_name_git_reads_is_a_name_ortstack_reads(
    names: list[str], kinds: list[str], template: Path, base_env: dict[str, str]
) -> None:
    env = git_env(base_env)
    with tempfile.TemporaryDirectory(prefix="ortstack-names-") as folder:
        repo = Path(folder) / "repo"
        shutil.copytree(template, repo, symlinks=True)
        movable = [repo / "a", repo / "b", repo / "src" / "x", repo / "src" / "y"]  # one for each rename
        for name, kind in zip(names, kinds, strict=False):
            path = repo / "src" / name
            if kind == "link":
                path.symlink_to("x")
            elif kind == "binary":
                path.write_bytes(bytes(range(256)))
            elif kind == "rename":
                movable.pop().rename(path)
            else:
                path.write_text(f"{name}\n")
        assert git(["add", "-A"], repo, env).returncode == 0
        diff = git(["diff", "--cached", "--full-index", "--binary", "-M"], repo, env).stdout.decode()
    assert diff.startswith("diff --git ")
    if any("\\" in name for name in names):  # refused on purpose (Windows reads it as /): compare the names only
        assert set(patchpaths.git_names(diff, "made-by-git.patch", base_env)) <= patchpaths.diff_names(diff)
    else:  # the whole check passes, its "git reads what ortstack reads" included
        patchpaths.check(diff, diff, "made-by-git.patch", base_env)


# --------------------------------------------------------------------------------------------------
# Archives.

MEMBER_NAMES = st.lists(
    st.sampled_from(["top", "a", "b", "..", ".", "", "C:", "\\", "x\\..\\..", "/"]), min_size=1, max_size=4
).map("/".join)
KINDS = st.sampled_from(["file", "dir", "symlink", "hardlink", "fifo", "chr"])
MEMBERS = st.lists(st.tuples(MEMBER_NAMES, KINDS, TARGETS | MEMBER_NAMES), max_size=6)


def make_tar(members: list[tuple[str, str, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, target in members:
            info = tarfile.TarInfo(name)
            info.type = {
                "file": tarfile.REGTYPE,
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chr": tarfile.CHRTYPE,
            }[kind]
            data = target.encode() if kind == "file" else b""
            info.size = len(data)
            if kind in ("symlink", "hardlink"):
                info.linkname = target
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def make_zip(members: list[tuple[str, str, str]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, kind, target in members:
            info = zipfile.ZipInfo(name + ("/" if kind == "dir" else ""), date_time=(2026, 1, 1, 0, 0, 0))
            mode = {"symlink": stat.S_IFLNK | 0o777, "dir": stat.S_IFDIR | 0o755}.get(kind, stat.S_IFREG | 0o644)
            info.external_attr = mode << 16
            bundle.writestr(info, "" if kind == "dir" else target)
    return buffer.getvalue()


def extract_checked(sandbox: Path, data: bytes, suffix: str) -> None:
    """Extract ``data`` into the sandbox's ``dest``, emptied first (as fetch extracts into a new folder, and so
    that a failure is the example's own, not the sum of the examples before it): only ortstack's errors,
    nothing written beside it."""
    shutil.rmtree(sandbox / "dest")
    (sandbox / "dest").mkdir()
    source = sandbox / f"input{suffix}"
    source.write_bytes(data)
    before = outside_of_dest(sandbox)
    try:
        archive.extract(source, sandbox / "dest", limits=archive.Limits(max_mib=1, max_ratio=1000))
    except OrtstackError as error:
        assert_one_line(error)
    assert_nothing_outside(sandbox, before)


@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")
@cases("tar_members")
@given(members=MEMBERS)
def test_tar_members_never_land_outside(members: list[tuple[str, str, str]], sandbox: Path) -> None:
    extract_checked(sandbox, make_tar(members), ".tar.gz")


@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")
@cases("zip_members")
@given(members=MEMBERS)
def test_zip_members_never_land_outside(members: list[tuple[str, str, str]], sandbox: Path) -> None:
    extract_checked(sandbox, make_zip(members), ".zip")


GOOD_MEMBERS = [
    ("top/VERSION_NUMBER", "file", "1.31.0"),
    ("top/cmake", "dir", ""),
    ("top/link", "symlink", "VERSION_NUMBER"),
]


@cases("damaged_archives")
@given(
    form=st.sampled_from([".tar.gz", ".zip", ".tar"]),
    cut=st.integers(min_value=0, max_value=2000),
    flips=st.lists(
        st.tuples(st.integers(min_value=0, max_value=2000), st.integers(min_value=1, max_value=255)), max_size=4
    ),
)
def test_damaged_archives_raise_only_ortstack_errors(
    form: str, cut: int, flips: list[tuple[int, int]], sandbox: Path
) -> None:
    if form == ".zip":
        data = bytearray(make_zip(GOOD_MEMBERS))
    else:
        data = bytearray(make_tar(GOOD_MEMBERS))
        if form == ".tar":
            data = bytearray(gzip.decompress(data))
    for offset, mask in flips:
        data[offset % len(data)] ^= mask
    extract_checked(sandbox, bytes(data[: len(data) - cut % len(data)]), form)


# --------------------------------------------------------------------------------------------------
# Stack files.

KEYS = st.sampled_from(
    ["repository", "commit", "archive_url", "archive_sha256", "id", "file", "sha256", "mode", "platforms", "guard",
     "origin", "kind", "pr", "head", "base", "files", "patterns", "jobs", "repo", "colour", "a\nb", "é"]
)  # fmt: skip
SCALARS = st.one_of(
    st.text(max_size=8),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.sampled_from(["c971ca2f8a1b2c3d4e5f60718293a4b5c6d7e8f9", "ab" * 32, "patches/0001-a.patch", "in-base", "pr"]),
)
VALUES: st.SearchStrategy[Any] = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=6
)
TABLES = st.fixed_dictionaries(
    {},
    optional={
        "ort": st.dictionaries(KEYS, VALUES, max_size=5),
        "patch": st.lists(st.dictionaries(KEYS, VALUES, max_size=5), max_size=3) | VALUES,
        "variant": st.dictionaries(st.sampled_from(["webgpu", "plugin"]), st.dictionaries(KEYS, VALUES, max_size=3)),
        "build": st.dictionaries(KEYS, VALUES, max_size=3) | VALUES,
        "deps": st.dictionaries(st.sampled_from(["onnx", "dawn"]), st.dictionaries(KEYS, VALUES, max_size=3)) | VALUES,
        "extra": VALUES,
    },
)


def load_checked(folder: Path, text: str) -> None:
    path = folder / "stack.toml"
    path.write_text(text, encoding="utf-8")
    before = tree_state(folder)
    try:
        config.load(path)
    except OrtstackError as error:
        assert_one_line(error)
    assert tree_state(folder) == before


@cases("config_documents")
@given(document=TABLES)
def test_config_loader_reports_each_problem_in_one_line(document: dict[str, Any], sandbox: Path) -> None:
    load_checked(sandbox, tomli_w.dumps(document))


VALID = FULL


@cases("config_text")
@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=len(VALID)), st.integers(0, 6), st.text(max_size=4)), max_size=4
    )
)
def test_config_loader_survives_any_edit_of_a_good_file(edits: list[tuple[int, int, str]], sandbox: Path) -> None:
    text = VALID
    for at, remove, insert in edits:
        text = text[:at] + insert + text[at + remove :]
    load_checked(sandbox, text)


@cases("config_nesting")
@given(
    opener=st.sampled_from(["[", "{ a = ", "[{ a = ", "{ a = ["]),
    depth=st.integers(min_value=0, max_value=5000),
    closed=st.booleans(),
)
def test_config_loader_bounds_any_nesting(opener: str, depth: int, closed: bool, sandbox: Path) -> None:  # noqa: FBT001
    closers = {"[": "]", "{ a = ": " }", "[{ a = ": " }]", "{ a = [": "] }"}
    inner = opener * depth + "1" + (closers[opener] * depth if closed else "")
    load_checked(sandbox, f"{VALID}\nnested = {inner}\n")


# --------------------------------------------------------------------------------------------------
# Lock files: a value is used as a file name, so only a digest or a commit id may come out.

LOCK_KEYS = st.sampled_from(
    ["https://example.invalid/ort.tar.gz", "patch.a.sha256", "patch.a.head", "patch..head", "x", "a\nb", "é"]
)
LOCK_VALUES = st.one_of(
    st.sampled_from(["ab" * 32, "c971ca2f8a1b2c3d4e5f60718293a4b5c6d7e8f9", "../../../x", "AB" * 32, "", "/etc"]),
    st.text(max_size=70),
    VALUES,
)
LOCK_TABLES = st.sampled_from(["resolved", "other"])
GOOD_LOCK = (
    '[resolved]\n"https://example.invalid/ort.tar.gz" = "' + "ab" * 32 + '"\n'
    '"patch.a.head" = "c971ca2f8a1b2c3d4e5f60718293a4b5c6d7e8f9"\n'
)


def lock_checked(folder: Path, data: bytes) -> None:
    path = folder / "stack.lock"
    path.write_bytes(data)
    before = tree_state(folder)
    try:
        lock = Lock.load(path)
    except OrtstackError as error:
        assert_one_line(error)
    else:
        for key, value in lock.values.items():
            hexes = "0123456789abcdef"
            assert set(value) <= set(hexes), (key, value)
            assert len(value) == (40 if key.startswith("patch.") and key.endswith(".head") else 64), (key, value)
    assert tree_state(folder) == before


@cases("lock_documents")
@given(
    document=st.dictionaries(st.sampled_from(["resolved", "other"]), st.dictionaries(LOCK_KEYS, LOCK_VALUES) | VALUES)
)
def test_lock_loader_gives_only_digests_or_one_line(document: dict[str, Any], sandbox: Path) -> None:
    lock_checked(sandbox, tomli_w.dumps(document).encode())


@cases("lock_text")
@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=len(GOOD_LOCK)), st.integers(0, 6), st.binary(max_size=4)),
        max_size=4,
    )
)
def test_lock_loader_survives_any_edit_of_a_good_file(edits: list[tuple[int, int, bytes]], sandbox: Path) -> None:
    data = GOOD_LOCK.encode()
    for at, remove, insert in edits:
        data = data[:at] + insert + data[at + remove :]
    lock_checked(sandbox, data)


# --------------------------------------------------------------------------------------------------
# A wheel's build info, as `inspect` and the wheel suites read it.

JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
GOOD_INFO = json.loads(GOOD_JSON)


@st.composite
def build_info_bytes(draw: st.DrawFn) -> bytes:
    """The good build info with a field replaced, removed or added, or its bytes edited."""
    form = draw(st.sampled_from(["field", "drop", "add", "bytes", "any"]))
    document = dict(GOOD_INFO)
    if form == "any":
        return json.dumps(draw(JSON_VALUES)).encode()
    if form == "bytes":
        data = GOOD_JSON
        for at, remove, insert in draw(
            st.lists(st.tuples(st.integers(0, len(data)), st.integers(0, 6), st.binary(max_size=4)), max_size=4)
        ):
            data = data[:at] + insert + data[at + remove :]
        return data
    name = draw(st.sampled_from(sorted(document)))
    if form == "drop":
        document.pop(name)
    elif form == "add":
        document[draw(st.text(max_size=6))] = draw(JSON_VALUES)
    else:
        document[name] = draw(JSON_VALUES)
    return json.dumps(document).encode()


@cases("build_info_members")
@given(
    data=build_info_bytes(),
    mode=st.sampled_from([stat.S_IFREG | 0o644, stat.S_IFLNK | 0o777, stat.S_IFDIR | 0o755]),
    headers=st.sampled_from([{}, {"flags": 0x1}, {"method": DEFLATE64}, {"method": 99}]),
)
def test_build_info_reader_gives_build_info_or_one_line(
    data: bytes, mode: int, headers: dict[str, int], sandbox: Path
) -> None:
    wheel = wheel_with(sandbox, data, mode=mode, **headers)
    try:
        info = buildinfo.read_from_wheel(wheel)
    except OrtstackError as error:
        assert_one_line(error)
    else:
        assert json.loads(info.to_json())["ort_commit"] == info.ort_commit


def test_a_link_to_itself_over_a_folder_already_there_is_refused(sandbox: Path) -> None:
    """``extract`` writes into an existing folder: where ``a`` is already a folder, tarfile cannot make the
    link ``a -> a`` and copies its target instead, which is the link again (a RecursionError before)."""
    (sandbox / "dest" / "a").mkdir()
    source = sandbox / "input.tar.gz"
    source.write_bytes(make_tar([("a", "symlink", "a")]))
    with pytest.raises(UnsafeArchiveError, match="one leads round to itself where a folder stands"):
        archive.extract(source, sandbox / "dest")
    assert (sandbox / "dest" / "a").is_dir()
