"""Answering a flow (docs/api.md, "Answering a flow", "Approvals"): the open
questions and approvals of a job, and an answer to one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import APIRouter

from compiler import file_value_problem
from stream.gateway.errors import BODY_CODES, WRITE_CODES, ApiError, error_responses
from stream.gateway.models import AnswerAccepted, AnswerBody, InterruptList
from stream.gateway.routes.capabilities import require
from stream.gateway.routes.shared import SECURED, Gateway, GatewayDep, PrincipalDep, now_iso
from stream.gateway.tokens import Principal
from topics import APPROVERS_DEFAULT, Answerer, JournalInterrupt, MessageRecord, encode

__all__ = ["get_interrupts", "post_answer", "router"]

router = APIRouter(dependencies=SECURED, tags=["interrupts"])


async def _may_answer(
    gateway: Gateway, asked: Mapping[str, Any] | None, by: Answerer, principal: Principal
) -> None:
    """Nothing when the token holder may answer the open interrupt ``asked``:
    a question with a ``world`` token, an approval (whose ``approvers`` name
    ``operators``) with an approver's (docs/api.md, "Approvals"). Else the
    refusal is journaled when the interrupt is open (a ``journal.interrupt``
    ``refused``, the interrupt left open) and raised as 403. An ``agent`` or
    ``tool`` token is refused whether or not the interrupt is open."""
    approval = asked is not None and asked.get("kind") == "approval"
    approvers = list((asked or {}).get("approvers") or APPROVERS_DEFAULT)
    try:
        require(principal, "answer_approval" if approval else "answer_question")
        if approval and "operators" not in approvers:
            raise ApiError(
                403, "not_an_approver",
                f"this approval is answered by {', '.join(approvers)} on their own channel, "
                "not through the API (docs/api.md, 'Approvals')",
            )  # fmt: skip
    except ApiError:
        if asked is not None:
            fields = ("job_key", "run_id", "flow", "node", "interrupt_id", "kind")
            refusal = JournalInterrupt(
                **{k: asked[k] for k in fields}, at=now_iso(), status="refused",
                approvers=approvers if approval else [], by=by,
            )  # fmt: skip
            await gateway.send(gateway.model.topics.journal, refusal.job_key, encode(refusal))
        raise


@router.post(
    "/v1/jobs/{key}/answers",
    status_code=202,
    response_model=AnswerAccepted,
    operation_id="answerInterrupt",
    responses=error_responses(
        *BODY_CODES,
        *WRITE_CODES,
        "source_not_allowed",
        "not_an_approver",
        "job_not_found",
        "interrupt_not_open",
        "worktree_changed",
        "answer_not_allowed",
    ),
)
async def post_answer(
    gateway: GatewayDep, key: str, body: AnswerBody, principal: PrincipalDep
) -> AnswerAccepted:
    """The answer to a flow's open question or approval: it goes on `messages`
    (inbound, with the interrupt id and who answered), where the agents service
    takes it once and resumes the flow. An interrupt that is not open (unknown,
    answered already, expired) answers 409 `interrupt_not_open` and writes
    nothing; an answer a question does not allow, 422 `answer_not_allowed`; an
    answer to a coding job's checkpoint while its worktree differs from the
    checkpoint's, 409 `worktree_changed` with both fingerprints (`expected`,
    `found`), nothing written (docs/coding.md, "A changed worktree: the 409"). A
    question is answered with a `world` token, an approval only by an approver
    (403 `source_not_allowed` or `not_an_approver`, journaled, nothing else
    written)."""
    model = gateway.model
    async with gateway.lock(key):
        entry = model.entry(key)
        if entry is None or not entry.visible:
            raise ApiError(404, "job_not_found", f"no job {key!r}")
        asked = model.interrupts.get(key, {}).get(body.interrupt_id)
        by = Answerer(source=principal.source, name=principal.name,
                      approver=principal.approver)  # fmt: skip
        await _may_answer(gateway, asked, by, principal)
        if asked is None:
            raise ApiError(
                409,
                "interrupt_not_open",
                f"job {key!r} has no open question {body.interrupt_id!r}: it was answered "
                "already, expired, or never asked (GET /v1/jobs/{key}/interrupts lists "
                "the open ones)",
            )
        allowed = list(asked.get("answers") or [])
        if allowed and body.answer not in allowed:
            raise ApiError(
                422,
                "answer_not_allowed",
                f"question {body.interrupt_id!r} takes one of: {', '.join(allowed)}",
            )
        changed = model.interrupts.worktree_changed(key, asked)
        if changed is not None:
            raise ApiError(
                409,
                "worktree_changed",
                f"the worktree of job {key!r} changed since its checkpoint was asked "
                f"({changed['why']}): an answer resumes the job from the worktree as the "
                "checkpoint saw it, so put its files back to answer (docs/coding.md, "
                "'A changed worktree: the 409')",
                extra={"expected": changed["expected"], "found": changed["found"]},
            )
        if asked.get("expects") == "file":
            _file_answer(gateway, body.interrupt_id, body.answer, asked.get("accept"))
        gateway.room()
        message_id = f"answer:{body.interrupt_id}"
        answer = body.answer
        text = answer if isinstance(answer, str) else orjson.dumps(answer).decode()
        record = MessageRecord(
            job_key=key,
            message_id=message_id,
            direction="in",
            channel="web",
            text=text,
            at=now_iso(),
            interrupt_id=body.interrupt_id,
            answer=body.answer,
            by=by,
        )
        meta = await gateway.send(model.topics.messages, key, encode(record))
        model.answered(key, body.interrupt_id)  # a second answer is refused from now
    return AnswerAccepted(
        key=key,
        interrupt_id=body.interrupt_id,
        message_id=message_id,
        partition=meta.partition,
        offset=meta.offset,
    )


@router.get(
    "/v1/jobs/{key}/interrupts",
    response_model=InterruptList,
    operation_id="listInterrupts",
    responses=error_responses("job_not_found"),
)
async def get_interrupts(gateway: GatewayDep, key: str) -> InterruptList:
    """The job's open flow questions and approvals (what
    `POST /v1/jobs/{key}/answers` accepts), oldest first."""
    model = gateway.model
    entry = model.entry(key)
    if entry is None or not entry.visible:
        raise ApiError(404, "job_not_found", f"no job {key!r}")
    return InterruptList(key=key, interrupts=list(model.interrupts.get(key, {}).values()))


def _file_answer(gateway: Gateway, interrupt_id: str, answer: Any, accept: str | None) -> None:
    """422 ``answer_not_allowed`` unless ``answer`` is the file value of a stored
    file (an upload's, ``POST /v1/files``) of a type the question accepts
    (docs/flows.md, "File channels")."""
    problem = file_value_problem(answer, accept)
    if problem is None:
        assert gateway.files is not None  # build_api makes one
        stored = gateway.files.get(answer["id"])
        if stored is None:
            problem = f"no file {answer['id']!r} was uploaded (POST /v1/files)"
        elif stored.media_type != answer["mediaType"]:
            problem = f"file {answer['id']!r} is {stored.media_type}"
    if problem is not None:
        raise ApiError(
            422, "answer_not_allowed", f"question {interrupt_id!r} takes a file: {problem}"
        )
