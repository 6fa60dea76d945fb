"""Taught questions at the front door: which one answers each question of a request, and the
checks of a new taught question and of a label.

A question is answered by a taught question when it names one (``"x_taught": "tq_…"``, the
newest ready version of its question), or, unless it says ``"x_taught": false``, when the
caller has taught a question with the same model, type, instructions and criteria
(``decide.core.taught.match_key``) and its newest ready version is used
(``teach.records.answering``). The choice is made
once, here, and written into the stored question, so a job is answered by the readout that
was ready when it was accepted, wherever and whenever it is decoded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from decide.api.context import ApiContext
from decide.core.errors import FieldError, InvalidRequest, Loc, RequestTooLarge
from decide.core.protocol import DecisionRequest, is_blank_state, plain_json_problem
from decide.core.questions import (
    TAUGHT_FIELD,
    Collector,
    Question,
    canonical_questions,
    json_kind,
)
from decide.core.taught import (
    ALWAYS,
    AUTO,
    MAX_EXAMPLES,
    MIN_EXAMPLES,
    MIN_EXAMPLES_PER_ANSWER,
    allowed_answers,
    answer_index,
    answer_keys,
    match_key,
    parse_taught_question,
    superseded,
)
from decide.llm.catalog import gguf_path
from decide.llm.identity import model_identity
from decide.teach import records as taught_records


def _refuse(loc: Loc, msg: str, kind: str = "value_error") -> InvalidRequest:
    return InvalidRequest(errors=[FieldError(loc=loc, msg=msg, type=kind)])


def resolve_taught(ctx: ApiContext, *, owner: str, model: str,
                   questions: tuple[Question, ...],
                   stored_questions: dict[str, Any]) -> dict[str, Any]:
    """The stored questions (``canonical_questions``) with ``x_taught`` set wherever a ready
    taught question of the caller answers. A named one that is not the caller's ready taught
    question of this model and answers, or a taught question fitted on another file of the
    model, is a 422 at the question's ``x_taught``."""
    keys = {question.id: match_key(model, question) for question in questions
            if question.taught is None}
    matches = taught_records.answering(ctx.db, owner=owner, match_keys=list(keys.values()))
    resolved = canonical_questions(stored_questions)
    for question in questions:
        loc = ("questions", question.id, TAUGHT_FIELD)
        if isinstance(question.taught, str):
            identity = _check_named(ctx, owner, model, question)
            _check_identity(ctx, model, question.taught, identity, loc)
        elif question.id in keys and keys[question.id] in matches:
            chosen, identity = matches[keys[question.id]]
            _check_identity(ctx, model, chosen, identity, loc)
            resolved[question.id] = {**resolved[question.id], TAUGHT_FIELD: chosen}
    return resolved


def _check_identity(ctx: ApiContext, model: str, taught_id: str, identity: str | None,
                    loc: Loc) -> None:
    """A readout fitted on another file of the model (``llm.identity``) is refused."""
    current = model_identity(gguf_path(ctx.catalog.get(model), ctx.settings))
    if identity != current:
        raise _refuse(loc, f"taught question {taught_id} was fitted on another file of model "
                           f"{model!r} ({identity or 'unknown'}; it now loads {current}): "
                           "teach it again (POST /v1/questions), or ask with x_taught false")


def _check_named(ctx: ApiContext, owner: str, model: str, question: Question) -> str | None:
    """A named taught question must be the caller's, ready, of this model, with this
    question's type and answers; its model identity."""
    assert isinstance(question.taught, str)
    loc = ("questions", question.id, TAUGHT_FIELD)
    record = taught_records.get_taught(ctx.db, question.taught, owner)
    if record is None:
        raise _refuse(loc, f"no taught question {question.taught!r}", "not_found")
    if record.status != taught_records.READY:
        raise _refuse(loc, f"taught question {question.taught} is {record.status}, not ready; "
                           "wait for it (GET /v1/questions/{id}?wait=30)")
    newer = taught_records.superseded_by(ctx.db, record)
    if newer is not None:
        raise superseded(loc, question.taught, record.version, newer.id, newer.version)
    if record.model != model:
        raise _refuse(loc, f"taught question {question.taught} was taught on model "
                           f"{record.model!r}, and this request asks model {model!r}")
    taught, _ = parse_taught_question(record.question)
    assert taught is not None  # checked when it was taught
    if taught.type != question.type or sorted(answer_keys(taught)) != sorted(
            answer_keys(question)):
        raise _refuse(loc, f"taught question {question.taught} is a {taught.type} answering "
                           f"{sorted(answer_keys(taught))}; this question is a {question.type} "
                           f"answering {sorted(answer_keys(question))}")
    return record.model_identity


def with_resolved(ctx: ApiContext, *, owner: str, model: str, request: DecisionRequest,
                  stored: dict[str, Any]) -> dict[str, Any]:
    """A stored request body with its questions resolved (``resolve_taught``)."""
    return {**stored, "questions": resolve_taught(ctx, owner=owner, model=model,
                                                  questions=request.questions,
                                                  stored_questions=stored["questions"])}


# A new taught question.

def checked_question(raw: Any) -> Question:
    """The ``question`` of ``POST /v1/questions``, with errors located at ``question``."""
    if not isinstance(raw, dict):
        raise _refuse(("question",), "Field required: question must be a question object "
                      f"(type, instructions, criteria), not {json_kind(raw)}",
                      "missing" if raw is None else "dict_type")
    question, errors = parse_taught_question(raw)
    if question is None:
        raise InvalidRequest(errors=[replace(error, loc=error.loc[1:])
                                     for error in errors.errors])
    return question


def checked_use(body: dict[str, Any]) -> tuple[bool, str]:
    """``from_labels`` and ``use`` of a new taught question (422 at the field)."""
    from_labels = body.get("from_labels", False)
    if not isinstance(from_labels, bool):
        raise _refuse(("from_labels",), "from_labels must be true or false", "bool_type")
    use = body.get("use", AUTO)
    if use not in (AUTO, ALWAYS):
        raise _refuse(("use",), "use must be \"auto\" (answer only where the fit beats "
                      "zero-shot on its examples) or \"always\"", "literal_error")
    return from_labels, use


def check_examples(raw: Any, question: Question, *, labelled: int,
                   labelled_answers: list[Any], from_labels: bool = False
                   ) -> list[dict[str, Any]]:
    """``examples``: a list of ``{"state", "answer"}``; every answer a valid one, every answer
    of the question given at least ``MIN_EXAMPLES_PER_ANSWER`` times (labels counted)."""
    if raw is None:
        raw = []
    if from_labels and not labelled and not raw:
        raise _refuse(("from_labels",), "nothing is labelled for this question yet: label "
                      "decisions that asked it (POST /v1/jobs/{id}/labels), or give examples",
                      "value_error")
    if not isinstance(raw, list):
        raise _refuse(("examples",), f"examples must be a list of {{\"state\", \"answer\"}} "
                      f"objects, not {json_kind(raw)}", "list_type")
    total = len(raw) + labelled
    if total > MAX_EXAMPLES:
        raise _refuse(("examples",), f"a taught question takes at most {MAX_EXAMPLES:,} "
                      f"examples (labelled decisions included); it has {total:,}", "too_long")
    errors = Collector()
    counts: Counter[int] = Counter()
    kept = []
    for number, example in enumerate(raw):
        loc: Loc = ("examples", number)
        if not isinstance(example, dict):
            errors.add(loc, f"an example must be an object {{\"state\", \"answer\"}}, not "
                       f"{json_kind(example)}", "dict_type")
            continue
        state = example.get("state")
        if not isinstance(state, (str, dict, list)):
            errors.add((*loc, "state"), "state must be a string, an object or an array, not "
                       f"{json_kind(state)}", "missing" if state is None else "type_error")
        elif is_blank_state(state):
            errors.add((*loc, "state"), "state is blank: an example needs the text it is "
                       "about", "value_error")
        index = answer_index(question, example.get("answer"))
        if index is None:
            errors.add((*loc, "answer"), f"answer {example.get('answer')!r} is not an answer "
                       f"of this question: it must be {allowed_answers(question)}",
                       "value_error")
        else:
            counts[index] += 1
        kept.append({"state": state, "answer": example.get("answer")})
    if errors.errors:
        raise InvalidRequest(errors=errors.errors)
    for answer in labelled_answers:
        index = answer_index(question, answer)
        if index is not None:
            counts[index] += 1
    keys = answer_keys(question)
    lacking = [keys[index] for index in range(len(keys))
               if counts[index] < MIN_EXAMPLES_PER_ANSWER]
    if lacking:
        raise _refuse(("examples",), f"every answer needs at least {MIN_EXAMPLES_PER_ANSWER} "
                      f"example(s); these have fewer: {', '.join(map(repr, lacking))}",
                      "too_short")
    if total < MIN_EXAMPLES:
        raise _refuse(("examples",), f"a taught question needs at least {MIN_EXAMPLES} "
                      f"examples; it has {total}", "too_short")
    return kept


def check_readable(ctx: ApiContext, model: str) -> None:
    """A model whose hidden state cannot be recovered cannot be taught (422 at ``model``)."""
    # gguf's tensor readers (and yaml with them) load with the first teaching, not at start
    from decide.llm.hidden import HiddenProjection, HiddenStateUnavailable

    config = ctx.catalog.get(model)
    try:
        HiddenProjection.of(gguf_path(config, ctx.settings))
    except (HiddenStateUnavailable, OSError) as problem:
        raise _refuse(("model",), f"model {model!r} cannot be taught: its hidden state cannot "
                                  f"be read ({problem})") from problem


def example_rows(ctx: ApiContext, model: str, question: Question,
                 examples: list[dict[str, Any]]) -> tuple[int, int]:
    """Rows and tokens the fit decodes; an example over a limit is a 422 at its state."""
    planner = ctx.planners[model]
    rows = tokens = 0
    for number, example in enumerate(examples):
        try:
            plan = planner.plan(DecisionRequest(state=example["state"], questions=(question,)))
        except RequestTooLarge as large:
            raise _refuse(("examples", number, "state"), f"this example is over the limits: "
                          f"{large}", "too_long") from large
        rows += plan.row_total
        tokens += plan.input_tokens
    return rows, tokens


def check_label_answers(raw: Any, questions: tuple[Question, ...]) -> dict[str, Any]:
    """``answers`` of ``POST /v1/jobs/{id}/labels``: question key → the right answer."""
    if not isinstance(raw, dict) or not raw:
        raise _refuse(("answers",), "answers must be an object of question key → the right "
                      "answer, with at least one entry", "dict_type")
    by_id = {question.id: question for question in questions}
    errors = Collector()
    for key, answer in raw.items():
        question = by_id.get(key)
        if question is None:
            errors.add(("answers", key), f"the job has no question {key!r}; its questions are "
                       f"{', '.join(map(repr, by_id))}", "value_error")
        elif answer_index(question, answer) is None:
            errors.add(("answers", key), f"answer {answer!r} is not an answer of this "
                       f"question: it must be {allowed_answers(question)}", "value_error")
    if errors.errors:
        raise InvalidRequest(errors=errors.errors)
    problem = plain_json_problem(raw)
    if problem is not None:
        raise _refuse(("answers", *problem.loc), problem.message)
    return raw
