"""Cohere's ``max_tokens_per_doc`` (``decide.core.doc_cut``): a document over the limit is cut
to whole words, else to characters, never to nothing; a document within it is left as it is."""

from __future__ import annotations

from decide.core.doc_cut import cut_to_tokens


def words(text: str) -> int:
    return len(text.split())


def characters(text: str) -> int:
    return len(text)


def test_a_document_within_the_limit_is_left_whole():
    assert cut_to_tokens("one two three", 3, words) == "one two three"
    assert cut_to_tokens("  spaced   out  ", 2, words) == "  spaced   out  "


def test_a_document_over_the_limit_keeps_its_longest_whole_words_that_fit():
    text = "alpha beta\tgamma\n\ndelta epsilon " * 40
    for limit in (1, 2, 3, 7, 50, 199):
        cut = cut_to_tokens(text, limit, words)
        assert words(cut) == limit and text.startswith(cut)
        assert not cut[-1].isspace() and text[len(cut)].isspace()  # ends at a word's end


def test_a_first_word_over_the_limit_is_cut_at_a_character():
    url = "https://example.test/" + "x" * 300 + " then words"
    assert cut_to_tokens(url, 40, characters) == url[:40]


def test_a_document_is_never_cut_to_nothing():
    def four_per_character(text: str) -> int:  # an emoji read as four byte tokens
        return 4 * len(text)

    assert cut_to_tokens("🍎🍐 pear", 1, four_per_character) == "🍎"


def test_a_huge_document_is_counted_about_twice_its_cut_never_whole():
    text = "word " * 200_000
    counted: list[int] = []

    def counting(part: str) -> int:
        counted.append(len(part))
        return words(part)

    assert words(cut_to_tokens(text, 100, counting)) == 100
    assert max(counted) <= 2 * 4 * 100 * 2 and len(counted) < 40  # never the whole text


def test_a_cut_document_is_never_left_blank():
    """A document that opens with blank lines: its cut starts at its first word, so it is
    never whitespace alone (one newline fits one character's token)."""
    text = "\n\n" + "x" * 50
    assert cut_to_tokens(text, 1, characters) == "x"
    assert cut_to_tokens("\n\n  alpha beta gamma", 2, words) == "alpha beta"
    assert cut_to_tokens("  within", 5, characters) == "withi"
