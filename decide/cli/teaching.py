"""``decide teach FILE.jsonl``: teach every question of a labelled file, through a running
service (``--url``: the taught questions are stored and answer that key's requests) or
in-process (the figures only, nothing stored); ``--holdout`` scores a held-out file after each
fit (``decide.cli.holdout``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from decide.cli.common import add_service_args, positive_seconds, reading, whole_number
from decide.cli.holdout import both_ways, question_key, render_holdout, score_holdout
from decide.client.errors import InvalidRequestError
from decide.core.protocol import is_blank_state
from decide.core.questions import Collector, parse_question
from decide.core.taught import (
    MIN_EXAMPLES,
    MIN_EXAMPLES_PER_ANSWER,
    allowed_answers,
    answer_index,
    answer_keys,
    match_key,
)

if TYPE_CHECKING:
    from decide.client import Client

LINE = "line"
"""An example's line in its file (``read_examples``), for errors; never sent."""


def read_examples(path: str) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The file's questions in first-seen order, each with its examples ``{"state",
    "answer", "line"}``. A line is ``{"state", "question", "answer"}`` (``gold`` is read as
    ``answer``, so the project's quality sets work as they are)."""
    groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    with reading("FILE.jsonl", path), open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {number}"
            try:
                item = json.loads(line)
            except ValueError as error:
                raise ValueError(f"{where}: not JSON ({error})") from error
            if not isinstance(item, dict) or "state" not in item or "question" not in item:
                raise ValueError(f"{where}: a line needs state, question and answer")
            answer = item.get("answer", item.get("gold"))
            if answer is None:
                raise ValueError(f"{where}: a line needs an answer (or gold)")
            errors = Collector()
            question = parse_question("question", item["question"], errors)
            if question is None:
                raise ValueError(f"{where}: {errors.errors[0].describe()}")
            if answer_index(question, answer) is None:
                raise ValueError(f"{where}: answer {answer!r} is not an answer of this "
                                 f"question: it must be {allowed_answers(question)}")
            state = item["state"]
            if not isinstance(state, (str, dict, list)) or is_blank_state(state):
                raise ValueError(f"{where}: state must be a non-blank string, an object or an "
                                 "array")
            key = match_key("", question)
            groups.setdefault(key, (item["question"], []))[1].append(
                {"state": state, "answer": answer, LINE: number})
    if not groups:
        raise ValueError(f"{path} holds no examples")
    return list(groups.values())


def check_groups(path: str, groups: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
    """Every question of the file has an example of each answer and enough in all, checked
    before anything is taught (a file is taught whole or not at all)."""
    for question, examples in groups:
        parsed = parse_question("question", question, Collector())
        assert parsed is not None  # read_examples parsed it
        keys = answer_keys(parsed)
        counts = [0] * len(keys)
        for example in examples:
            counts[answer_index(parsed, example["answer"]) or 0] += 1
        lacking = [key for key, count in zip(keys, counts, strict=True)
                   if count < MIN_EXAMPLES_PER_ANSWER]
        title = question.get("instructions") or question.get("type")
        if lacking:
            raise ValueError(f"{path}: question {title!r}: every answer needs an example; "
                             f"these have none: {', '.join(map(repr, lacking))}")
        if len(examples) < MIN_EXAMPLES:
            raise ValueError(f"{path}: question {title!r}: a taught question needs at least "
                             f"{MIN_EXAMPLES} examples; it has {len(examples)}")


def first_per_answer(examples: list[dict[str, Any]], count: int | None) -> list[dict[str, Any]]:
    """The first ``count`` examples taken answer by answer in turn (all without a count)."""
    if count is None or count >= len(examples):
        return examples
    queues: dict[str, list[dict[str, Any]]] = {}
    for example in examples:
        queues.setdefault(json.dumps(example["answer"]), []).append(example)
    chosen: list[dict[str, Any]] = []
    while len(chosen) < count:
        for queue in queues.values():
            if queue and len(chosen) < count:
                chosen.append(queue.pop(0))
    return chosen


DENSE_NAMES = {"hidden": "hidden state", "both": "hidden state",
               "middle": "state's mean at a middle layer",
               "middle+lexical": "state's mean at a middle layer",
               "slot": "middle layer at the answer slot",
               "slot+lexical": "middle layer at the answer slot"}


def reads_of(fit: dict[str, Any]) -> str:
    """What the readout reads, as ``decide teach`` says it: a dense readout (the hidden state,
    a middle layer's mean or its value at the slot) with its regression and penalty, the
    state's words and characters, or a dense one and the words (fits from before say the
    hidden state)."""
    reads = fit.get("reads", "hidden")
    dense = (f"{DENSE_NAMES.get(reads, 'hidden state')}, {fit['readout']}, penalty "
             f"{fit['penalty']}")
    if reads in ("hidden", "middle", "slot"):
        return f"reads the {dense}"
    words = (f"{fit.get('lexical_terms', '?')} terms of the state, penalty "
             f"{fit.get('lexical_penalty')}")
    return f"reads {words}" if reads == "lexical" else f"reads the {dense}, and {words}"


def render_fit(question: dict[str, Any], status: str, fit: dict[str, Any] | None,
               error: dict[str, Any] | None, taught_id: str | None = None) -> str:
    title = question.get("instructions") or "(noul)"
    if fit is None:
        reason = (error or {}).get("message", status)
        return f"{title}\n  {taught_id or 'the fit'} {status}: {reason}\n"
    per_answer = ", ".join(f"{answer} {count}"
                           for answer, count in fit["examples_per_answer"].items())
    taught, zero = fit["taught"], fit.get("zero_shot") or {}
    lines = [f"{title} ({question['type']}, {fit['examples']} examples: {per_answer})",
             f"  taught     accuracy {taught['accuracy']:.3f}  ECE {taught['ece']:.3f}  "
             f"({fit['folds']}-fold cross-validated; {reads_of(fit)})"]
    if zero:
        lines.append(f"  zero-shot  accuracy {zero['accuracy']:.3f}  ECE {zero['ece']:.3f}  "
                     "(the same examples)")
    curve = fit.get("learning_curve") or []
    if curve:
        lines.append("  learning curve (accuracy on the other examples): " + ", ".join(
            f"{point['examples']} → {point['accuracy']:.2f}" for point in curve))
    gate = fit.get("gate")
    if gate:
        lines.append(f"  {'USED' if gate['used'] else 'NOT USED'}: {gate['reason']}")
    where = f"{taught_id} ready" if taught_id else "fitted"
    lines.append(f"  {where} in {fit.get('seconds', fit['fit_ms'] / 1000):.1f} s")
    return "\n".join(lines) + "\n"


def read_holdout(path: str | None) -> dict[str, list[dict[str, Any]]]:
    """``--holdout``: the held-out file's examples by question (``holdout.question_key``)."""
    if path is None:
        return {}
    return {question_key(question): examples for question, examples in read_examples(path)}


def teach_command(args: argparse.Namespace) -> int:
    groups = read_examples(args.file)
    held_out = read_holdout(args.holdout)
    chosen = [(question, first_per_answer(examples, args.per_question))
              for question, examples in groups]
    if args.url:
        check_groups(args.file, chosen)
        return _teach_through(args, chosen, held_out)
    # the server extra's; loads llama_cpp
    from decide.cli.teach_local import check_teachable, teach_in_process

    for question, examples in chosen:  # all of them, before a model is loaded
        check_teachable(args.file, question, examples)
    for question, examples in chosen:
        local = teach_in_process(question, examples, args.model, use=args.use)
        print(render_fit(question, "fitted", local.figures, None), end="", flush=True)
        if question_key(question) in held_out:
            held = score_holdout(question, held_out[question_key(question)], local.ask)
            print(render_holdout(args.holdout, held, local.figures["gate"]["used"]), end="")
        print(flush=True)
    return 0


def _teach_through(args: argparse.Namespace, chosen: list[tuple[dict[str, Any], list[Any]]],
                   held_out: dict[str, list[dict[str, Any]]]) -> int:
    """``--url``: each question taught through the service, and its held-out items asked."""
    from decide.client import Client  # httpx: loaded by the commands that go through --url

    failed = 0
    with Client(args.url, api_key=args.api_key, timeout=args.timeout) as client:
        for question, examples in chosen:  # every question checked before any is taught
            _checked_by(client, args, question, examples)
        for question, examples in chosen:
            taught = client.teach(question, sent(examples), model=args.model, wait=args.wait,
                                  use=args.use)
            failed += taught.status != "ready"
            print(render_fit(question, taught.status, taught.fit, taught.error, taught.id),
                  end="", flush=True)
            key = question_key(question)
            if taught.status == "ready" and key in held_out:
                held = score_holdout(question, held_out[key],
                                     _asker(client, question, taught.id, args.model))
                print(render_holdout(args.holdout, held, (taught.fit or {}).get(
                    "gate", {}).get("used", True)), end="")
            print(flush=True)
    return 1 if failed else 0


def sent(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The examples as the service takes them (their file lines left out)."""
    return [{key: value for key, value in example.items() if key != LINE}
            for example in examples]


def _checked_by(client: Client, args: argparse.Namespace, question: dict[str, Any],
                examples: list[dict[str, Any]]) -> None:
    """The service's own checks of one question (``POST /v1/questions/check``: its limits
    too, such as an example over the row limit); a refusal names the file and the line."""
    try:
        client.check_teaching(question, sent(examples), model=args.model, use=args.use)
    except InvalidRequestError as refused:
        for loc in refused.locations:
            if loc[:2] == ["body", "examples"] and len(loc) > 2 and isinstance(loc[2], int):
                line = examples[loc[2]].get(LINE)
                raise ValueError(f"{args.file}, line {line}: {refused.message}") from refused
        title = question.get("instructions") or question.get("type")
        raise ValueError(f"{args.file}: question {title!r}: {refused.message}") from refused


def _asker(client: Client, question: dict[str, Any], taught_id: str,
           model: str | None) -> Any:
    """A held-out state asked both ways through the service (``holdout.both_ways``)."""
    def ask(state: Any, _: Any) -> dict[str, Any]:
        return client.decide(state, both_ways(question, taught_id), model=model).answers

    return ask


def add_teach_parser(commands: Any, service_url: str | None) -> None:
    teach = commands.add_parser(
        "teach", help="teach questions from labelled examples (JSONL: state, question, answer)")
    teach.add_argument("file", metavar="FILE.jsonl",
                       help="JSONL: one {state, question, answer} a line "
                            "(quality/calibration.jsonl shows the format, gold as answer)")
    teach.add_argument("--model", help="a configured model (default: the default)")
    teach.add_argument("--per-question", type=whole_number("--per-question"),
                       help="only the first N examples of each question, answers in turn")
    teach.add_argument("--use", choices=("auto", "always"), default="auto",
                       help="auto (default): a fit answers only from 20 examples on, where "
                            "it beats zero-shot on its examples (and below 40, the same fit "
                            "on shuffled answers); always: answer with it anyway")
    teach.add_argument("--holdout", metavar="HELD.jsonl",
                       help="after each fit, ask this file's items of the same question with "
                            "the fit and zero-shot, and print both scores")
    teach.add_argument("--wait", type=positive_seconds("--wait"), default=600.0,
                       help="seconds to wait for each fit through --url (default 600)")
    add_service_args(teach, service_url)
    teach.set_defaults(handler=teach_command)
