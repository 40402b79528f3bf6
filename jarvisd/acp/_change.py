"""A code run's change in ``jarvis acp``'s code mode: the workspace a prompt runs in,
and the change offered to the client as a diff, applied once it allows it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from acp import schema
from acp.exceptions import RequestError

from .._errors import JarvisError
from ._edits import CODE_AGENT, FileChange, changed_files

if TYPE_CHECKING:
    from .._runcontext import RunContext
    from ..code import Workspace
    from ..runs import RunOutcome
    from ._agent import JarvisAcpAgent, Session, Update

__all__ = ["prepare_workspace", "settle_change", "text_block_content"]


def prepare_workspace(cwd: str, task: str) -> Workspace:
    from .._paths import paths
    from ..code import CodeStore, prepare

    state = paths().state
    store = CodeStore(state / "code.db")
    try:
        return prepare(cwd, store=store, state_dir=state, task=task[:2000], agent=CODE_AGENT)
    finally:
        store.close()


async def settle_change(
    agent: JarvisAcpAgent,
    session: Session,
    workspace: Workspace,
    outcome: RunOutcome | None,
    run: RunContext,
    queue: asyncio.Queue[Update],
) -> str:
    """Offer a code run's change to the client and apply it once allowed; the
    workspace is gone afterwards either way. What to tell the user."""
    from .._paths import paths
    from ..code import CodeStore, apply, discard

    state = paths().state
    store = CodeStore(state / "code.db")
    applied = False
    try:
        code = dict((outcome.metadata.get("code") or {}) if outcome is not None else {})
        files = code.get("files") or []
        if outcome is None or not outcome.ok or not files or session.cancelled:
            return "jarvis: no change to the project" if outcome is not None and outcome.ok else ""
        changes = await asyncio.to_thread(changed_files, session.cwd, workspace.path, files)
        await queue.join()
        call_id = f"{session.id[:8]}-{session.prompts}-change"
        allowed = await _offer(agent, session, run, call_id, files, changes)
        if not allowed:
            await agent._send(
                session, _call_done(call_id, "failed", "not applied: the project is untouched")
            )
            return "jarvis: the change was not applied"
        if changes is not None and agent.client_writes_files:
            for change in changes:
                await agent._conn.write_text_file(
                    session_id=session.id, path=change.path, content=change.new or ""
                )
            how = "written through the editor"
        else:
            await asyncio.to_thread(apply, workspace.id, store, state)
            applied = True
            how = "applied by jarvis (three-way)"
        await agent._send(session, _call_done(call_id, "completed", how))
        return f"jarvis: the change was {how}"
    except (JarvisError, RequestError, OSError, ConnectionError) as exc:
        return f"jarvis: the change was not applied: {exc}"
    finally:
        if not applied:
            try:
                await asyncio.to_thread(discard, store.get(workspace.id), store, state)
            except JarvisError:
                pass
        store.close()


async def _offer(
    agent: JarvisAcpAgent,
    session: Session,
    run: RunContext,
    call_id: str,
    files: list[dict[str, Any]],
    changes: list[FileChange] | None,
) -> bool:
    """Show the change as a pending edit call, and whether the client allows it."""
    content: list[Any] = [
        schema.FileEditToolCallContent(
            type="diff", path=c.path, old_text=c.old, new_text=c.new or ""
        )
        for c in changes or ()
    ]
    if not content:  # not text: the change is described, jarvis applies it
        listed = ", ".join(f"{f.get('status')} {f.get('path')}" for f in files[:50])
        content = [text_block_content(f"changes: {listed}")]
    title = f"apply the change to {len(files)} file{'s' if len(files) != 1 else ''}"
    locations = [schema.ToolCallLocation(path=c.path) for c in changes or ()][:50]
    await agent._send(
        session,
        schema.ToolCallStart(
            session_update="tool_call",
            tool_call_id=call_id,
            title=title,
            kind="edit",
            status="pending",
            content=content,
            locations=locations or None,
        ),
    )
    return await agent._ask(
        session,
        run,
        schema.ToolCallUpdate(
            tool_call_id=call_id,
            title=title,
            kind="edit",
            status="pending",
        ),
    )


def text_block_content(text: str) -> schema.ContentToolCallContent:
    return schema.ContentToolCallContent(
        type="content", content=schema.TextContentBlock(type="text", text=text)
    )


def _call_done(call_id: str, status: str, text: str) -> schema.ToolCallProgress:
    return schema.ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=call_id,
        status=status,  # type: ignore[arg-type]
        content=[text_block_content(text)],
    )
