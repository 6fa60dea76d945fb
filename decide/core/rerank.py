"""Cohere-compatible rerank, the pure part: the request checked, the decision it becomes, and
the decision's answers as Cohere's v2 rerank response.

A rerank is one ordinary decision job: its state is the query (``Query: <query>``), and each
document is one noul question, keyed by the document's index, whose instructions are the
document followed by the relevance question (``Document: <document>\\n\\n<question>``). So the
query is the prefix every row shares and each document's row is its own question piece; the
reader packs those pieces in batches under the rule that keeps each row's numbers a function of
(prefix, piece) alone (SPEC §3.7, ``llm.packing``): a document's score depends only on the query,
that document and the question, never on the other documents, their order or their number.

Under the option readout (the embedded default's) a row reads the text
``Query: <query>\\n\\nDocument: <document>\\n\\n<question>`` then the answer, which is the row of
the noul asked with ``rerank_example_state(query, document)`` as its state: a relevance
question is taught from such states (``POST /v1/questions``) and then named in ``x_question``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from decide.core.doc_cut import Count, cut_to_tokens
from decide.core.errors import InvalidRequest
from decide.core.protocol import DecisionRequest, plain_json_problem
from decide.core.questions import (
    NOUL_QUESTION,
    NUL,
    TAUGHT_FIELD,
    Collector,
    NoulQuestion,
    json_kind,
    parse_question,
)

RERANK_FIELD = "x_rerank"
"""A decision body's mark that it is a rerank (``{"instructions": <the relevance question>}``,
with the ``top_n`` and ``return_documents`` it was sent with when not their defaults): its
questions are one noul per document."""
MAX_DOCUMENTS = 1000
DOCUMENTS_PER_SEARCH_UNIT = 100
"""Cohere bills one search unit per query and up to 100 documents."""
RELEVANCE_QUESTION = "Does the document answer or help with the query?"
"""The zero-shot relevance question when the request names none (``x_question``)."""
QUERY_HEAD = "Query: "
DOCUMENT_HEAD = "Document: "
QUESTION_GAP = "\n\n"


@dataclass(frozen=True)
class RerankRequest:
    """A checked rerank request. ``question``: the relevance noul's wire object (its
    ``instructions`` and ``criteria``); ``taught``: the taught question named in
    ``x_question`` (its question is looked up by the front door), else None."""

    query: str
    documents: tuple[str, ...]
    model: str | None = None
    top_n: int | None = None
    return_documents: bool = False
    question: dict[str, Any] | None = None
    taught: str | None = None
    max_tokens_per_doc: int | None = None
    """Cohere's: a document over this many tokens is cut (``decide.core.doc_cut``) before it
    is read; None: never cut (a document over the row limit is a 413)."""


def _documents(raw: Any, errors: Collector) -> tuple[str, ...]:
    if not isinstance(raw, list):
        what = "Field required: " if raw is None else ""
        errors.add(("documents",), f"{what}documents must be an array of 1 to {MAX_DOCUMENTS:,} "
                   f"strings or {{\"text\": ...}} objects, not {json_kind(raw)}",
                   "missing" if raw is None else "list_type")
        return ()
    if not raw or len(raw) > MAX_DOCUMENTS:
        errors.add(("documents",), f"documents must hold 1 to {MAX_DOCUMENTS:,} documents; it "
                   f"holds {len(raw):,}", "too_short" if not raw else "too_long")
        return ()
    found = []
    for index, item in enumerate(raw):
        text = item.get("text") if isinstance(item, dict) else item
        loc = ("documents", index, "text") if isinstance(item, dict) else ("documents", index)
        if not isinstance(text, str):
            errors.add(loc, "a document must be a string or an object with a string \"text\", "
                       f"not {json_kind(text if isinstance(item, dict) else item)}", "string_type")
        elif not text.strip():
            errors.add(loc, "a document must not be blank", "string_too_short")
        else:
            found.append(text)
    return tuple(found)


def _whole(raw: Any, field: str, errors: Collector) -> int | None:
    """A field that is a whole number of 1 or more, or null."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        errors.add((field,), f"{field} must be a whole number of 1 or more, or null; not "
                   f"{raw!r}", "int_type")
        return None
    return raw


def _question(raw: Any, errors: Collector) -> tuple[dict[str, Any] | None, str | None]:
    """``x_question``: absent or null (the default relevance question), a taught question's
    id, or a noul question object (its ``type`` may be left out)."""
    loc = ("x_question",)
    if raw is None:
        return None, None
    if isinstance(raw, str):
        if raw.startswith("tq_") and len(raw) > 3 and NUL not in raw:
            return None, raw
        errors.add(loc, "x_question must be a taught question's id (\"tq_...\"), a noul "
                   f"question object, or null; not the string {raw!r}", "value_error")
        return None, None
    if not isinstance(raw, dict):
        errors.add(loc, "x_question must be a taught question's id (\"tq_...\"), a noul "
                   f"question object, or null; not {json_kind(raw)}", "dict_type")
        return None, None
    if raw.get("type", "noul") != "noul":
        errors.add((*loc, "type"), f"the relevance question must be a noul, not "
                   f"{raw.get('type')!r}", "literal_error")
        return None, None
    body = {key: raw[key] for key in ("instructions", "criteria", TAUGHT_FIELD) if key in raw}
    inner = Collector()
    parse_question("x_question", {**body, "type": "noul"}, inner)
    for error in inner.errors:  # located at questions.x_question.<field>
        errors.add(("x_question", *error.loc[2:]), error.msg, error.type)
    taught = body.pop(TAUGHT_FIELD, None)
    return ({"type": "noul", **body} if not inner.errors else None,
            taught if isinstance(taught, str) else None)


COHERE_MODEL_PREFIX = "rerank-"
"""Cohere's rerank models are named ``rerank-v3.5``, ``rerank-english-v3.0``...: code moved
from Cohere changes its base URL and key, not its model, so such a name asks for the default
model here."""


def parse_rerank(body: Any) -> RerankRequest:
    """Validate a decoded rerank body; raise ``InvalidRequest`` naming every bad field."""
    errors = Collector()
    if not isinstance(body, dict):
        errors.add((), f"the body must be a JSON object, not {json_kind(body)}", "dict_type")
        raise InvalidRequest(errors=errors.errors)
    problem = plain_json_problem(body)
    if problem is not None:
        errors.add(problem.loc, problem.message)
        raise InvalidRequest(errors=errors.errors)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        errors.add(("model",), f"model must be a string or null, not {json_kind(model)}",
                   "string_type")
    elif isinstance(model, str) and model.startswith(COHERE_MODEL_PREFIX):
        model = None  # Cohere's own model name, kept by code moved here: the default model
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        what = "Field required: " if query is None else ""
        errors.add(("query",), f"{what}query must be a non-blank string, not "
                   f"{json_kind(query) if not isinstance(query, str) else 'a blank one'}",
                   "missing" if query is None else "string_type")
    documents = _documents(body.get("documents"), errors)
    top_n = _whole(body.get("top_n"), "top_n", errors)
    max_tokens = _whole(body.get("max_tokens_per_doc"), "max_tokens_per_doc", errors)
    returned = body.get("return_documents", False)
    if returned is not None and not isinstance(returned, bool):
        errors.add(("return_documents",), f"return_documents must be true or false, not "
                   f"{json_kind(returned)}", "bool_type")
    question, taught = _question(body.get("x_question"), errors)
    if errors.errors:
        raise InvalidRequest(errors=errors.errors)
    return RerankRequest(query=query, documents=documents, model=model, top_n=top_n,
                         return_documents=bool(returned), question=question, taught=taught,
                         max_tokens_per_doc=max_tokens)


def rerank_state(query: str) -> str:
    """The decision's state: the query, the prefix every document's row shares."""
    return QUERY_HEAD + query


def rerank_example_state(query: str, document: str) -> str:
    """The state of a teaching example for a relevance question: under the option readout its
    row is, to the character, the row a rerank reads for (query, document)."""
    return rerank_state(query) + QUESTION_GAP + DOCUMENT_HEAD + document


def document_instructions(document: str, instructions: str) -> str:
    """One document's question: the document, then the relevance question's instructions."""
    return DOCUMENT_HEAD + document + QUESTION_GAP + instructions


def documents_read(request: RerankRequest,
                   counter: Callable[[], Count]) -> tuple[str, ...] | None:
    """The documents as the rows read them, cut to ``max_tokens_per_doc`` with the counter
    ``counter()`` gives (the model's; asked for only then); None when the request sets none."""
    if request.max_tokens_per_doc is None:
        return None
    count = counter()
    return tuple(cut_to_tokens(document, request.max_tokens_per_doc, count)
                 for document in request.documents)


def decision_body(request: RerankRequest, question: dict[str, Any] | None = None,
                  taught: str | None = None,
                  documents: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The System One body a rerank is decoded as: the query as the state, one noul per
    document keyed by its index. ``question``: the relevance question's wire object (the
    default one when None); ``taught``: the taught question that answers each document;
    ``documents``: the texts read (the request's documents cut to ``max_tokens_per_doc``),
    when not the request's own."""
    documents = request.documents if documents is None else documents
    question = question or {"type": "noul", "instructions": RELEVANCE_QUESTION}
    parsed = parse_question("q", question, Collector())
    assert isinstance(parsed, NoulQuestion)  # checked by parse_rerank or a taught question
    instructions = parsed.instructions or NOUL_QUESTION
    base = {key: question[key] for key in ("criteria",) if question.get(key) is not None}
    if taught is not None:
        base[TAUGHT_FIELD] = taught
    return {"model": request.model, "state": rerank_state(request.query),
            "questions": {str(index): {"type": "noul", **base,
                                       "instructions": document_instructions(document,
                                                                             instructions)}
                          for index, document in enumerate(documents)},
            RERANK_FIELD: _mark(request, instructions, documents)}


def _mark(request: RerankRequest, instructions: str,
          documents: tuple[str, ...]) -> dict[str, Any]:
    """The rerank mark: what ``GET /v1/rerank/{id}`` needs beyond the documents to answer the
    ranking asked for (left out when the default, so a plain rerank stores only its question):
    ``top_n``, ``return_documents``, and ``max_tokens_per_doc`` with the whole text of each
    document it cut (``uncut``, by index: the text a ranking echoes)."""
    mark: dict[str, Any] = {"instructions": instructions}
    if request.top_n is not None:
        mark["top_n"] = request.top_n
    if request.return_documents:
        mark["return_documents"] = True
    if request.max_tokens_per_doc is not None:
        mark["max_tokens_per_doc"] = request.max_tokens_per_doc
        mark["uncut"] = {str(index): whole for index, (whole, read)
                         in enumerate(zip(request.documents, documents, strict=True))
                         if whole != read}
    return mark


def stored_rerank(stored: dict[str, Any] | None) -> RerankRequest | None:
    """The rerank a job's stored System One body was decoded for: its documents (read back from
    its questions, keyed by index, whole where ``max_tokens_per_doc`` cut them), ``top_n``
    and ``return_documents`` (None: no rerank)."""
    stored = stored or {}
    mark, questions = stored.get(RERANK_FIELD), stored.get("questions")
    instructions = mark.get("instructions") if isinstance(mark, dict) else None
    if not isinstance(instructions, str) or not isinstance(questions, dict) or not questions:
        return None
    tail = QUESTION_GAP + instructions
    documents = []
    for index in range(len(questions)):
        question = questions.get(str(index))
        noul = isinstance(question, dict) and question.get("type") == "noul"
        text = question.get("instructions") if noul else None  # type: ignore[union-attr]
        if not (isinstance(text, str) and text.startswith(DOCUMENT_HEAD) and text.endswith(tail)
                and len(text) >= len(DOCUMENT_HEAD) + len(tail)):
            return None
        documents.append(text[len(DOCUMENT_HEAD):len(text) - len(tail)])
    uncut = mark.get("uncut")
    if isinstance(uncut, dict):  # a caller's own x_rerank may hold anything: strings only
        documents = [whole if isinstance(whole := uncut.get(str(index)), str) else text
                     for index, text in enumerate(documents)]
    top_n, state = mark.get("top_n"), stored.get("state")
    whole = isinstance(top_n, int) and not isinstance(top_n, bool) and top_n > 0
    return RerankRequest(query=state.removeprefix(QUERY_HEAD) if isinstance(state, str) else "",
                         documents=tuple(documents), model=stored.get("model"),
                         top_n=top_n if whole else None,
                         return_documents=mark.get("return_documents") is True)


def relevance_question(request: DecisionRequest) -> NoulQuestion | None:
    """The relevance question of a rerank's decision, without any document (None: the request
    is no rerank). A rerank is marked with its question's instructions I, holds at most
    ``MAX_DOCUMENTS`` questions, each a noul asking ``Document: <document>\n\nI``. Its row
    count is bounded by its documents, not by the request row limit (SPEC §2.4), and under the
    option readout each row's prior is this question's over the content-free state, the prior
    of the noul whose state holds the query and the document (read once for all of them)."""
    mark = request.extensions.get(RERANK_FIELD)
    instructions = mark.get("instructions") if isinstance(mark, dict) else None
    if not isinstance(instructions, str) or len(request.questions) > MAX_DOCUMENTS:
        return None
    tail = QUESTION_GAP + instructions
    for question in request.questions:
        if not (isinstance(question, NoulQuestion) and question.instructions is not None
                and question.instructions.startswith(DOCUMENT_HEAD)
                and question.instructions.endswith(tail)):
            return None
    first = request.questions[0]
    assert isinstance(first, NoulQuestion)
    return NoulQuestion(id=first.id, instructions=instructions, when_true=first.when_true,
                        when_false=first.when_false)


def is_rerank(request: DecisionRequest) -> bool:
    return relevance_question(request) is not None


def search_units(documents: int) -> int:
    return max(1, math.ceil(documents / DOCUMENTS_PER_SEARCH_UNIT))


def ranked(scores: list[float], top_n: int | None = None) -> list[int]:
    """Document indices by score, highest first; a tie keeps the lower index first."""
    order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
    return order if top_n is None else order[:top_n]


def rerank_response(job_id: str, request: RerankRequest, answers: dict[str, Any],
                    build: str | None = None) -> dict[str, Any]:
    """Cohere's v2 rerank response from the decision's answers (keyed by document index), with
    ``x_build``, the llama.cpp build that decoded them, where it is known."""
    scores = [float(answers[str(index)]["noul"]) for index in range(len(request.documents))]
    results = []
    for index in ranked(scores, request.top_n):
        result: dict[str, Any] = {"index": index, "relevance_score": scores[index]}
        if request.return_documents:
            result["document"] = {"text": request.documents[index]}
        taught = answers[str(index)].get(TAUGHT_FIELD)
        if taught is not None:
            result[TAUGHT_FIELD] = taught
        results.append(result)
    return {"id": job_id, "results": results,
            "meta": {"api_version": {"version": "2"},
                     "billed_units": {"search_units": search_units(len(request.documents))}},
            **({"x_build": build} if build else {})}
