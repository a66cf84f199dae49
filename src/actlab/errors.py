"""One error type that every user-facing failure goes through.

A message a user can act on names the file, the field, what was expected, what was found and the fix.
The CLI prints these without a traceback and exits with status 2.
"""

from __future__ import annotations

from pathlib import Path


class ActlabError(Exception):
    """A failure caused by input the user controls (a file, a flag, a config value)."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        expected: object = None,
        found: object = None,
        fix: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = str(file) if file is not None else None
        self.field = field
        self.expected = expected
        self.found = found
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        lines = [self.problem]
        if self.file is not None:
            lines.append(f"  file:     {self.file}")
        if self.field is not None:
            lines.append(f"  field:    {self.field}")
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.found is not None:
            lines.append(f"  found:    {self.found}")
        if self.fix is not None:
            lines.append(f"  fix:      {self.fix}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "problem": self.problem,
            "file": self.file,
            "field": self.field,
            "expected": None if self.expected is None else str(self.expected),
            "found": None if self.found is None else str(self.found),
            "fix": self.fix,
        }


class Terminated(SystemExit):
    """Raised in the main thread by SIGTERM where :func:`actlab.utils.procs.exit_on_sigterm` is active:
    unwinds like Ctrl-C (every ``finally`` runs: worker pools stop, temporary outputs are removed) and,
    uncaught, exits with 128 + the signal number, as a process killed by that signal would."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(128 + signum)
        self.signum = signum
