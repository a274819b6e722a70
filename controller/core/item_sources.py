"""Which memories each item of a summary came from, and what goes when they are all gone
(docs/privacy.md, "When a memory is deleted"). An item with no entry is never dropped."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from controller.core.memories import Memory
from controller.core.quoting import unquoted
from controller.core.summary import PriorSummary, StructuredSummary, SummaryItem

TITLE = "Title"  # the title is an item too: one derived from a deleted request goes with it
REFERENCES = "References"
CHUNK_FALLBACK_MAX = 32  # a larger chunk is no item's fallback source: the item stays unsourced
_WORD = re.compile(r"\w{4,}")
_SENTENCE_END = re.compile(r"[.!?;:\n]+")
# quotes, markdown marks, brackets and a word's trailing punctuation: what two items may differ
# by and still say one fact (a symbol inside a word, or before one, as in C++, !=, -5, €, counts)
_DECORATION = re.compile(r"[\s\"'`*_()\[\]]+|[.,;:!?]+(?=[\s\"'`*_)\]]|$)")
CANDIDATES_MAX = 2000  # memories an item is compared with, at most, before it is left unsourced
WIDE, NARROW = 8, 4  # bytes of a key; NARROW ones (release 0.1.0's) are read, never written


def _hex(text: str, size: int = WIDE) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).hexdigest()


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def identity(text: str) -> str:
    """What an item says, a quote's label aside: what items are deduplicated by."""
    return " ".join(_DECORATION.sub(" ", unquoted(text).lower()).split())


def _key_text(text: str) -> str:
    """What items are keyed and attributed by: coarser than identity (stored keys keep it)."""
    return norm(unquoted(text))


def item_key(section: str, text: str) -> str:
    """The key of an item as stored (quoting.as_item)."""
    return _hex(f"{section}\0{_key_text(text)}")


def _keys(name: str) -> tuple[str, str]:
    """Every key an entry may name an item or a memory by: this release's and 0.1.0's."""
    return _hex(name), _hex(name, NARROW)


def _names(section: str, text: str) -> set[str]:
    return set(_keys(f"{section}\0{_key_text(text)}"))


def _fields(memory: Memory) -> tuple[str, ...]:
    return (memory.document, memory.prompt, memory.thought, memory.response)


class _Chunk:
    """A pass's memories, normalised once and indexed by sentence and by word."""

    def __init__(self, memories: Sequence[Memory]) -> None:
        self.ids = [m.id for m in memories]
        self.texts = [norm(" ".join(_fields(m))) for m in memories]
        self.by_sentence: dict[str, set[int]] = {}
        self.by_word: dict[str, set[int]] = {}
        for index, memory in enumerate(memories):
            for field in _fields(memory):
                for sentence in (field, *_SENTENCE_END.split(field)):
                    self.by_sentence.setdefault(norm(sentence), set()).add(index)
            for word in set(self.texts[index].split()):
                self.by_word.setdefault(word, set()).add(index)

    def attribute(self, text: str) -> list[str]:
        """The ids of the memories that say this item, by the rules of docs/privacy.md."""
        key = _key_text(text)
        if not key or not self.ids:
            return []
        # looked for among the memories that have its rarest word (at most CANDIDATES_MAX),
        # the first in order of equally rare ones: the same sources on every replica
        postings = [self.by_word.get(w, set()) for w in sorted(set(key.split()))]
        rarest = min(postings, key=len, default=set())
        if len(rarest) <= CANDIDATES_MAX and (
            whole := [self.ids[i] for i in sorted(rarest) if key in self.texts[i]]
        ):
            return whole
        words = set(_WORD.findall(key))
        postings = [self.by_word.get(w, set()) for w in words]
        few = sum(map(len, postings)) <= CANDIDATES_MAX * 8
        shared = Counter(i for posting in postings for i in posting) if few else Counter()
        best = max(shared.values(), default=0)
        if words and best / len(words) >= 0.6:
            return [self.ids[i] for i in sorted(shared) if shared[i] == best]
        return list(self.ids) if len(self.ids) <= CHUNK_FALLBACK_MAX else []


def record(
    prior: StructuredSummary | None,
    stored: Mapping[str, Iterable[str]],
    memories: Sequence[Memory],
) -> list[str]:
    """The prior's entries, then this pass's: per memory that says an item the pass stores,
    or repeats one with sources (a summarizer does not propose what is held)."""
    entries = dict.fromkeys(prior.item_sources if prior is not None else [])
    chunk = _Chunk(memories)

    def add(item: str, memory_ids: Iterable[str]) -> None:
        entries.update(dict.fromkeys(f"{item}:{_hex(i)}" for i in memory_ids))

    for section, texts in stored.items():
        for text in texts:
            add(item_key(section, text), chunk.attribute(text))
    if prior is not None and memories:
        # looked up by key, so a pass costs its chunk, not its items
        recorded = {entry.partition(":")[0] for entry in entries}
        sections = (*prior.sections, REFERENCES, TITLE)
        for sentence, indices in chunk.by_sentence.items():
            for section in sections:
                named = f"{section}\0{sentence}"
                if sentence and not recorded.isdisjoint(_keys(named)):
                    add(_hex(named), (chunk.ids[i] for i in sorted(indices)))
    return list(entries)


def _keeping(
    summary: StructuredSummary, keeps: Callable[[str, str], bool], entries: list[str]
) -> tuple[StructuredSummary, int]:
    """The summary with the items (and marks) `keeps` accepts, these entries; how many went."""

    def unmarked(section: str, item: SummaryItem) -> SummaryItem:
        gone = item.superseded_by and not keeps(section, item.superseded_by)
        return item.model_copy(update={"superseded_by": None}) if gone else item

    sections = {
        title: [unmarked(title, i) for i in items if keeps(title, i.text)]
        for title, items in summary.sections.items()
    }
    references = [r for r in summary.references if keeps(REFERENCES, r)]
    went = sum(map(len, summary.sections.values())) - sum(map(len, sections.values()))
    went += len(summary.references) - len(references)
    update = {"sections": sections, "references": references, "item_sources": entries}
    return summary.model_copy(update=update), went


def _sources(
    summary: StructuredSummary, living_ids: Iterable[str]
) -> tuple[dict[str, set[str]], set[str], list[str]]:
    """Per item, its living sources; the items with a gone source; the living entries."""
    by_key = {key: i for i in living_ids for key in _keys(i)}
    living_of: dict[str, set[str]] = {}
    gone, kept = set[str](), list[str]()
    for entry in summary.item_sources:
        item, _, source = entry.partition(":")
        if source in by_key:
            living_of.setdefault(item, set()).add(by_key[source])
            kept.append(entry)
        else:
            gone.add(item)
    return living_of, gone, kept


def forget_gone(
    summary: StructuredSummary,
    living_ids: Iterable[str],
    retitle: Callable[[str | None], str],
) -> tuple[StructuredSummary, int]:
    """The summary without the items (and marks) whose sources are all gone, how many went;
    a title that went is made again; the same object when nothing changed."""
    living_of, losing, kept_entries = _sources(summary, living_ids)
    dead = losing - living_of.keys()  # every source gone
    if not dead:
        pruned = len(kept_entries) != len(summary.item_sources)
        return (summary.model_copy(update={"item_sources": kept_entries}) if pruned else summary), 0

    def keeps(section: str, text: str) -> bool:
        names = _names(section, text)
        return dead.isdisjoint(names) or not living_of.keys().isdisjoint(names)

    kept, gone = _keeping(summary, keeps, kept_entries)
    if not keeps(TITLE, summary.title):
        requests = kept.sections.get("User Requests") or []
        kept = kept.model_copy(update={"title": retitle(requests[0].text if requests else None)})
        gone += 1
    return kept, gone


def partly_gone(
    summary: StructuredSummary, living_ids: Iterable[str]
) -> tuple[StructuredSummary, list[str], int]:
    """The summary without the items whose memories are partly gone, the living ones' ids
    (summarized again), how many went: for a summarizer whose items blend memories."""
    living_of, gone, _ = _sources(summary, living_ids)
    partial = (gone & living_of.keys()) - _names(TITLE, summary.title)
    if not partial:
        return summary, [], 0
    entries = [e for e in summary.item_sources if e.partition(":")[0] not in partial]
    kept, went = _keeping(summary, lambda s, text: partial.isdisjoint(_names(s, text)), entries)
    return kept, sorted({m for i in partial for m in living_of[i]}), went


def _texts(summary: StructuredSummary) -> Iterator[tuple[str, str | None]]:
    """(section, text) of everything a summary stores that an entry names, in order."""
    yield TITLE, summary.title
    yield from ((REFERENCES, r) for r in summary.references)
    for section, items in summary.sections.items():
        for item in items:
            yield from ((section, item.text), (section, item.superseded_by))


def rekeyed(before: PriorSummary | None, after: PriorSummary | None) -> PriorSummary | None:
    """`after` (`before` with texts masked in place) with entries naming each item's text now."""
    if not (isinstance(before, StructuredSummary) and isinstance(after, StructuredSummary)):
        return after
    moved = {
        name: item_key(section, new)
        for (section, old), (_, new) in zip(_texts(before), _texts(after), strict=False)
        if old and new and old != new
        for name in _names(section, old)
    }
    entries = (entry.partition(":") for entry in after.item_sources)
    renamed = dict.fromkeys(f"{moved.get(item, item)}:{source}" for item, _, source in entries)
    return after.model_copy(update={"item_sources": list(renamed)}) if moved else after
