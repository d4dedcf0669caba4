"""The learner's working copies of the chapters, and course updates that never lose them.

``chapters/NN_topic.ipynb`` stay as the course ships them; a learner works in
``workspace/NN_topic.ipynb`` (a sibling of ``chapters/``, so relative paths such as
``../solutions/...`` mean the same; git-ignored). ``workspace/.course.json`` records which course
version each copy was made from. The rules follow nbgitpuller's where they fit:

* a chapter the learner has no copy of (new in the course, or deleted by the learner) is copied;
* a copy the learner did not change follows the course (replaced by the new version);
* a copy the learner changed is never overwritten; they are told the course changed and that
  ``course.py reset NN`` takes the new version (their copy goes to ``workspace/backups/``);
* course files the learner edited in place (tracked by git) are saved to ``workspace/backups/``
  before ``git pull`` restores them, so a pull never conflicts and nothing is lost.

Standard library only: ``course.py`` imports it before anything is installed.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import time

DIR = "workspace"
RECORD = ".course.json"
LANGS = ("en", "zh")  # the Chinese edition: chapters/zh/ -> workspace/zh/ (one level down in both)


def _dirs(root: str, lang: str) -> tuple[str, str, str]:
    """(the course's chapters, the learner's copies, the record's key prefix) of an edition."""
    if lang not in LANGS:
        raise ValueError(f"no {lang!r} edition of the course; the editions are {', '.join(LANGS)}")
    sub = "" if lang == "en" else lang
    return os.path.join(root, "chapters", sub), os.path.join(root, DIR, sub), (f"{sub}/" if sub else "")


def _norm(x):
    """Notebook JSON with the spelling differences of different writers removed (line lists vs
    strings, key order), so that "changed" means the learner changed a cell or an output."""
    if isinstance(x, list):
        return "".join(x) if all(isinstance(i, str) for i in x) else [_norm(i) for i in x]
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in sorted(x.items()) if k not in ("metadata", "id")}
    return x


def fingerprint(path: str) -> str:
    try:
        cells = json.load(open(path, encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return "unreadable"  # never equal to a course version: treated as the learner's own
    return hashlib.sha256(json.dumps(_norm(cells), sort_keys=True).encode()).hexdigest()


def _record(root: str) -> dict:
    try:
        return json.load(open(os.path.join(root, DIR, RECORD)))
    except (OSError, ValueError):
        return {}


def _save_record(root: str, rec: dict) -> None:
    with open(os.path.join(root, DIR, RECORD), "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)


def _trust(trust: list[str] | None, paths: list[str], env) -> None:
    """Sign fresh copies in the learner's notebook-signature store: JupyterLab draws widgets
    (from the stored widget state) only in trusted notebooks. Only course files are signed."""
    if trust and paths:
        r = subprocess.run([*trust, *paths], env=env, capture_output=True, text=True)
        if r.returncode:
            print(f"note: could not mark the copies as trusted ({r.stderr.strip()[-120:]}); "
                  "widgets show a placeholder until you run their cells")


def _copy(src: str, dst: str) -> None:
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)  # atomic: an interrupted update never leaves half a notebook


def backup(root: str, path: str) -> str:
    """Copy a file into workspace/backups/ with a timestamp; returns the backup's relative path.

    A file equal, byte for byte, to one of its backups already there is not copied again: that
    backup's path is returned."""
    import filecmp

    stamp = time.strftime("%Y%m%d-%H%M%S")
    rel = os.path.relpath(path, root)
    base, ext = os.path.splitext(rel.replace(os.sep, "__"))
    folder = os.path.join(root, DIR, "backups")
    for old in sorted(glob.glob(os.path.join(glob.escape(folder), f"{glob.escape(base)}.*{ext}")), reverse=True):
        if filecmp.cmp(old, path, shallow=False):
            return os.path.relpath(old, root)
    dst = os.path.join(folder, f"{base}.{stamp}{ext}")
    os.makedirs(folder, exist_ok=True)
    shutil.copy2(path, dst)
    return os.path.relpath(dst, root)


def sync(root: str, trust: list[str] | None = None, env=None, verbose: bool = False, skip: str | None = None,
         lang: str = "en") -> str:
    """Bring workspace/ up to date with chapters/ (``lang="zh"``: workspace/zh/ with chapters/zh/);
    returns the first chapter's path relative to workspace/.

    ``skip``: a chapter's file name left alone (``reset`` is about to deal with it)."""
    src_dir, dst_dir, key = _dirs(root, lang)
    shown = os.path.relpath(dst_dir, root)
    os.makedirs(dst_dir, exist_ok=True)
    rec, fresh, said = _record(root), [], []
    chapters = sorted(glob.glob(os.path.join(src_dir, "[0-9][0-9]_*.ipynb")))
    for src in chapters:
        name = os.path.basename(src)
        dst = os.path.join(dst_dir, name)
        if name == skip:
            continue
        course = fingerprint(src)
        if not os.path.exists(dst):
            _copy(src, dst)
            said.append(f"new: {shown}/{name}" if key + name not in rec else f"restored: {shown}/{name}")
            fresh.append(dst)
        elif rec.get(key + name) != course:
            mine = fingerprint(dst)
            if mine == course:
                pass  # already the course's version
            elif mine == rec.get(key + name):  # untouched by the learner: follows the course
                _copy(src, dst)
                fresh.append(dst)
                said.append(f"updated: {shown}/{name}")
            else:
                said.append(f"kept your {shown}/{name} (you changed it); the course's new version is "
                            f"{os.path.relpath(src, root)}: `python3 course.py reset {name[:2]}"
                            f"{'' if lang == 'en' else ' --lang ' + lang}` takes it (your copy is backed up)")
                continue  # the record keeps the old version, so the note comes again until resolved
        rec[key + name] = course
    _save_record(root, rec)
    _trust(trust, fresh, env)
    considered = [c for c in chapters if os.path.basename(c) != skip]
    if said and (verbose or len(said) < len(considered)):
        print("\n".join(said))
    elif said:
        print(f"your working copies of the {len(chapters)} chapters are in {shown}/ "
              f"(the course's stay in {os.path.relpath(src_dir, root)}/)")
    return key + os.path.basename(chapters[0]) if chapters else ""


def _matches(root: str, which: str, lang: str = "en") -> list[str]:
    chapters = sorted(glob.glob(os.path.join(_dirs(root, lang)[0], "[0-9][0-9]_*.ipynb")))
    key = which.zfill(2) if which.isdigit() else which
    return [c for c in chapters if os.path.basename(c).startswith(key)]


def chapter_name(root: str, which: str, lang: str = "en") -> str | None:
    """The file name ``reset NN`` means (None if ``which`` names no single chapter)."""
    match = _matches(root, which, lang)
    return os.path.basename(match[0]) if len(match) == 1 else None


def reset(root: str, which: str, trust: list[str] | None = None, env=None, lang: str = "en") -> int:
    match = _matches(root, which, lang)
    src_dir, dst_dir, key = _dirs(root, lang)
    if len(match) != 1:
        chapters = sorted(glob.glob(os.path.join(src_dir, "[0-9][0-9]_*.ipynb")))
        have = ", ".join(os.path.basename(c)[:2] for c in chapters)
        print(f"course.py reset: no single chapter {which!r} (chapters: {have})")
        return 2
    src = match[0]
    name = os.path.basename(src)
    dst = os.path.join(dst_dir, name)
    shown = os.path.relpath(dst, root)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    rec = _record(root)
    mine = fingerprint(dst) if os.path.exists(dst) else None
    # A copy that is the course's version (now or when it was made) holds nothing of the learner's:
    # no backup of it, and no second identical backup of a copy already saved.
    untouched = mine is not None and mine in (fingerprint(src), rec.get(key + name))
    kept = backup(root, dst) if mine is not None and not untouched else None
    _copy(src, dst)
    rec[key + name] = fingerprint(src)
    _save_record(root, rec)
    _trust(trust, [dst], env)
    if untouched:
        print(f"{shown} is the course's version again (you had not changed it: no backup needed)")
    else:
        print(f"{shown} is the course's version again" + (f"; your copy is in {kept}" if kept else ""))
    return 0


def _git(root: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)


def pull(root: str) -> int:
    """`git pull --ff-only` of the course, after saving any course file the learner edited."""
    if _git(root, "rev-parse", "--is-inside-work-tree").returncode:
        print("course.py update: this copy of the course is not a git clone; download the new version "
              f"and copy your {DIR}/ folder into it")
        return 1
    changed = [line[3:] for line in _git(root, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()]
    changed = [p.split(" -> ")[-1] for p in changed]
    saved = [backup(root, os.path.join(root, p)) for p in changed if os.path.isfile(os.path.join(root, p))]
    if changed:
        _git(root, "checkout", "--", *changed)  # pristine again; the learner's version is in backups/
        print(f"you had edited {len(changed)} course file(s); saved to {DIR}/backups/: " + ", ".join(saved))
    r = _git(root, "pull", "--ff-only")
    if r.returncode:
        print("course.py update: git pull failed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
        return 1
    print("course: " + (r.stdout.strip().splitlines() or ["up to date"])[-1])
    return 0
