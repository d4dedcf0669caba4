"""Who handed in what: the learners of a class, found in the folders a teacher collected.

A learner is a *person* with any number of notebooks (chapters 02, 04, 09, ...), never a file
name: two learners' ``02_process_groups_collectives.ipynb`` are two learners. The layouts classes
hand work in:

* one folder per learner, notebooks at any depth inside it::

      class/alice/02_process_groups_collectives.ipynb     -> alice
      class/bob/week2/02_process_groups_collectives.ipynb -> bob

  (``disttutor grade class`` or ``disttutor grade class/alice class/bob``: a folder that holds a
  course chapter's notebook itself, ``NN_*.ipynb``, is one learner's folder);
* nbgrader's ``submitted/<student>/<assignment>/*.ipynb`` (the course root, ``submitted/`` itself,
  or one student's folder in it);
* a flat folder of ``<name>_NN_*.ipynb`` files (``alice_02_process_groups.ipynb``) or of one
  notebook per learner (``alice.ipynb``).

Two different places that give the same learner name, or one learner with two notebooks of the
same file name, are an error naming the paths: a silent merge would drop someone's work.
Standard library only (the grader lists a class before anything is checked).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

CHAPTER_FILE = re.compile(r"\d\d(?:[_\- .]|$)")                   # 02_process_groups_collectives
PREFIXED = re.compile(r"(?P<name>.+?)[_\- ](?P<ch>\d\d)(?:[_\- ]|$)")  # alice_02_process_groups
NBGRADER = "submitted"


class RosterError(ValueError):
    """The folders do not say unambiguously who handed in what."""


@dataclass(frozen=True)
class Learner:
    name: str
    source: str                  # the folder (or "folder/name_*.ipynb") the name comes from
    notebooks: tuple[str, ...]


def chapter_of(path: str) -> int | None:
    """The chapter a notebook's file name says (``02_x`` or ``alice_02_x``), None if it says none."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if CHAPTER_FILE.match(stem):
        return int(stem[:2])
    m = PREFIXED.match(stem)
    return int(m.group("ch")) if m else None


def _notebooks_under(folder: str) -> list[str]:
    found = []
    for d, dirs, files in os.walk(folder):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))  # .ipynb_checkpoints: Jupyter's autosaves
        found += [os.path.join(d, f) for f in sorted(files) if f.endswith(".ipynb") and not f.startswith(".")]
    return found


def _by_file_name(path: str) -> tuple[str, str]:
    """(learner, source) for a notebook named after its learner (or a chapter file given alone)."""
    folder = os.path.dirname(os.path.abspath(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    if CHAPTER_FILE.match(stem):  # 02_x.ipynb given on its own: the folder it is in is the learner
        return os.path.basename(folder), os.path.dirname(path) or "."
    m = PREFIXED.match(stem)
    if m:
        return m.group("name"), os.path.join(os.path.dirname(path), m.group("name") + "_*.ipynb")
    return stem, path


def _is_learner_folder(folder: str) -> bool:
    if os.path.basename(os.path.dirname(os.path.abspath(folder))) == NBGRADER:
        return True
    direct = sorted(f for f in os.listdir(folder) if f.endswith(".ipynb"))
    chapters = [f for f in direct if CHAPTER_FILE.match(f)]
    named = [f for f in direct if not CHAPTER_FILE.match(f) and PREFIXED.match(f[:-6])]
    if chapters and named:  # a stray course copy among learners' files: whose is it?
        raise RosterError(f"{folder} holds both chapter files ({chapters[0]}) and learners' files ({named[0]}): "
                          f"move {chapters[0]} into its learner's folder, or rename it <name>_{chapters[0]}")
    return bool(chapters)


def _owners(path: str) -> list[tuple[str, str, str]]:
    """(learner, source, notebook) for every notebook a path given on the command line holds."""
    if os.path.isfile(path) and path.endswith(".ipynb"):
        return [(*_by_file_name(path), path)]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path!r} is not a notebook (.ipynb) or a folder of notebooks")
    found = _notebooks_under(path)
    if _is_learner_folder(path):
        name = os.path.basename(os.path.abspath(path))
        return [(name, path, nb) for nb in found]
    out = []
    for nb in found:
        parts = os.path.relpath(nb, path).split(os.sep)
        if NBGRADER in parts[:-2]:  # submitted/<student>/<assignment>/x.ipynb
            i = parts.index(NBGRADER)
            out.append((parts[i + 1], os.path.join(path, *parts[:i + 2]), nb))
        elif len(parts) == 1:
            out.append((*_by_file_name(nb), nb))
        else:  # class/<learner>/..., any depth below
            out.append((parts[0], os.path.join(path, parts[0]), nb))
    return out


def find(paths: list[str]) -> list[Learner]:
    """Every learner in ``paths`` (in the order found), each with all of their notebooks."""
    sources: dict[str, dict[str, list[str]]] = {}
    for p in paths:
        for name, source, nb in _owners(p):
            nbs = sources.setdefault(name, {}).setdefault(source, [])
            if nb not in nbs:  # the same file given twice (a folder and a file in it) counts once
                nbs.append(nb)
    if not sources:
        raise FileNotFoundError(f"no notebooks in {', '.join(paths)}")
    learners = []
    for name, by_source in sources.items():
        if len(by_source) > 1:
            raise RosterError(f"two learners are called {name!r}: {' and '.join(by_source)}; rename one of "
                              "them (or grade them in separate runs)")
        (source, nbs), = by_source.items()
        seen: dict[str, str] = {}
        for nb in nbs:
            base = os.path.basename(nb)
            if base in seen:
                raise RosterError(f"learner {name!r} has two notebooks called {base}: {seen[base]} and {nb}; "
                                  "keep the one to grade")
            seen[base] = nb
        learners.append(Learner(name, source, tuple(nbs)))
    return learners
