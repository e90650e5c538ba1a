"""
A sandbox's code contexts (`sbx.contexts`, docs/contract.md#code-contexts): stateful interpreters
whose variables and imports persist from one `run` to the next. `sbx.run_code(code)` runs in a
default python context it creates on first use.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ._http import Http, check_str, drop_none, segment

__all__ = ["CodeContext", "Contexts"]


class CodeContext:
    """A context: its record as of the last answer (`id`, `language`, `cwd`, `state`), and its runs."""

    def __init__(self, contexts: "Contexts", record: Dict[str, Any]) -> None:
        self._contexts = contexts
        self.record = record

    def __repr__(self) -> str:
        return f"CodeContext(id={self.id!r}, language={self.record['language']!r}, state={self.state!r})"

    @property
    def id(self) -> str:
        return str(self.record["id"])

    @property
    def state(self) -> str:
        """As of the last answer (idle, running, dead): `refresh()` asks again."""
        return str(self.record["state"])

    def refresh(self) -> "CodeContext":
        self.record = self._contexts.get(self.id).record
        return self

    def run(self, code: str, timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        """
        Runs code: `results` (the last expression's value as `text/plain`, figures as
        `image/png`), `stdout`, `stderr`, `error` (None, or `{name, value, traceback}` when it
        raised: still an answer, not an exception). A dead context raises SvcError `conflict`.
        """
        return self._contexts.run(self.id, code, timeout_ms)

    def interrupt(self) -> None:
        """Ends the run in progress: a `KeyboardInterrupt` error in python, `Interrupted` in javascript and bash."""
        self._contexts.interrupt(self.id)

    def delete(self) -> None:
        """Ends its interpreter."""
        self._contexts.delete(self.id)


class Contexts:
    """`sbx.contexts`: the code contexts of one sandbox."""

    def __init__(self, http: Http, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{segment(self._sandbox_id)}/contexts{suffix}"

    def create(
        self, language: str = "python", cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None
    ) -> CodeContext:
        """Starts an interpreter in the (running) sandbox; 409 `conflict` when its image lacks it."""
        check_str(language, "language")
        body = drop_none({"language": language, "cwd": cwd, "env": dict(env) if env is not None else None})
        return CodeContext(self, self._http.json("POST", self._path(), json=body))

    def list(self) -> List[CodeContext]:
        answer = self._http.json("GET", self._path())
        return [CodeContext(self, record) for record in answer["contexts"]]

    def get(self, context_id: str) -> CodeContext:
        return CodeContext(self, self._http.json("GET", self._path(f"/{segment(context_id)}")))

    def run(self, context_id: str, code: str, timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        check_str(code, "code")
        wait = max(self._http.timeout, (timeout_ms or 60_000) / 1000 + 30)
        body = drop_none({"code": code, "timeout_ms": timeout_ms})
        result: Dict[str, Any] = self._http.json(
            "POST", self._path(f"/{segment(context_id)}/run"), json=body, timeout=wait
        )
        return result

    def interrupt(self, context_id: str) -> None:
        self._http.request("POST", self._path(f"/{segment(context_id)}/interrupt"))

    def delete(self, context_id: str) -> None:
        self._http.request("DELETE", self._path(f"/{segment(context_id)}"))
