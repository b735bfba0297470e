"""The embedded default corpus: English-like sentences from a small seeded grammar.

Every sentence carries POS, a PTB-style tree ``(TOP (S (NP ...) (VP ...) (. .)))``, entities on
proper-noun NPs (PERSON / ORG / LOC / GPE from small gazetteers, some names ambiguous, e.g.
"Washington", "Amazon") and SRL per verb (ARG0 / ARG1 / ARGM-LOC / ARGM-TMP / ARGM-MOD /
ARGM-NEG / ARGM-MNR / ARGM-DIS / V). Clauses nest (``said that S``) and coordinate, so a sentence
has several predicates. Some words are ambiguous between noun and verb ("plan", "book", "run").

Output depends only on the seed: ``random.Random`` with seeds derived by SHA-256, no set or
hash-order iteration, so files are byte-identical on every machine.
"""

import hashlib
import json
import os
import random
from pathlib import Path

import nltk

from mtl_heads.data.conll2012 import write_conll2012
from mtl_heads.data.sentence import Sentence
from mtl_heads.files import file_sha256

DEMO_VERSION = 1  # bump when the grammar changes: cached corpora are then regenerated
DEMO_SIZES = {"train": 1200, "dev": 200, "test": 200}
MIN_WORDS, MAX_WORDS = 5, 30

# ---------------------------------------------------------------- lexicon

SINGULAR_DT = ["the", "the", "the", "a", "a", "this", "that", "every", "each", "no"]
PLURAL_DT = ["the", "the", "some", "these", "those", "no"]
ADJECTIVES = (
    "big small old new young red green blue dark bright quiet loud happy sad strange famous "
    "local foreign early late cheap expensive simple difficult modern ancient busy empty full "
    "tall short long narrow wide clever lazy brave careful serious friendly angry rich poor"
).split()
NOUNS = [  # (singular, plural); several are also verbs
    ("man", "men"), ("woman", "women"), ("child", "children"), ("teacher", "teachers"),
    ("doctor", "doctors"), ("student", "students"), ("farmer", "farmers"), ("driver", "drivers"),
    ("artist", "artists"), ("soldier", "soldiers"), ("lawyer", "lawyers"), ("manager", "managers"),
    ("writer", "writers"), ("neighbor", "neighbors"), ("officer", "officers"), ("nurse", "nurses"),
    ("dog", "dogs"), ("cat", "cats"), ("horse", "horses"), ("bird", "birds"),
    ("book", "books"), ("plan", "plans"), ("run", "runs"), ("call", "calls"), ("study", "studies"),
    ("design", "designs"), ("change", "changes"), ("answer", "answers"), ("report", "reports"),
    ("visit", "visits"), ("record", "records"), ("test", "tests"), ("watch", "watches"),
    ("walk", "walks"), ("order", "orders"), ("review", "reviews"), ("fund", "funds"),
    ("check", "checks"), ("show", "shows"), ("paint", "paints"), ("move", "moves"),
    ("letter", "letters"), ("car", "cars"), ("house", "houses"), ("bridge", "bridges"),
    ("computer", "computers"), ("picture", "pictures"), ("song", "songs"), ("story", "stories"),
    ("problem", "problems"), ("idea", "ideas"), ("company", "companies"), ("team", "teams"),
    ("machine", "machines"), ("road", "roads"), ("window", "windows"), ("door", "doors"),
    ("key", "keys"), ("box", "boxes"), ("bottle", "bottles"), ("table", "tables"),
    ("chair", "chairs"), ("paper", "papers"), ("phone", "phones"), ("bag", "bags"),
    ("ticket", "tickets"), ("message", "messages"), ("price", "prices"), ("law", "laws"),
    ("game", "games"), ("film", "films"), ("meal", "meals"), ("gift", "gifts"),
]
PLACE_NOUNS = (
    "city park office school market station library hospital village garden kitchen museum "
    "river forest hotel airport harbor factory church stadium"
).split()
TIME_NOUNS = "morning evening weekend meeting winter summer holiday night storm election war concert".split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
LOC_PREPS = ["in", "in", "at", "near"]
TIME_PREPS = ["during", "after", "before"]
NP_PREPS = ["of", "with", "from", "about"]

FIRST_NAMES = (
    "Anna Maria John Peter Laura David Sarah Omar Yuki Elena Carlos Fatima Ivan Grace Tom Lena "
    "Ahmed Chloe Marco Nina Jordan Georgia"
).split()
LAST_NAMES = (
    "Berg Lopez Smith Khan Tanaka Novak Rossi Okafor Schmidt Dubois Silva Cohen Larsen Walsh "
    "Moreau Washington Ford"
).split()
ORGS = [
    ["Acme", "Corp"], ["Northwind", "Bank"], ["Globex"], ["Initech"], ["Vertex", "Labs"],
    ["Harbor", "Trust"], ["Blue", "Star", "Airlines"], ["Amazon"], ["Ford"], ["Orion", "Systems"],
    ["Red", "Cross"], ["Summit", "Media"], ["Delta", "Foods"], ["Apex", "Motors"],
]
GPES = [
    ["Paris"], ["London"], ["Berlin"], ["Tokyo"], ["Cairo"], ["Lima"], ["Oslo"], ["Madrid"],
    ["New", "York"], ["San", "Diego"], ["Hong", "Kong"], ["France"], ["Brazil"], ["Canada"],
    ["Kenya"], ["Jordan"], ["Washington"], ["Georgia"], ["India"], ["Chicago"],
]
LOCS = [
    ["Lake", "Erie"], ["Mount", "Kenya"], ["Sahara"], ["Amazon"], ["Danube"], ["Everest"],
    ["Nile"], ["Alps"], ["Pacific"], ["Baltic", "Sea"], ["Rocky", "Mountains"],
]

SUBJECT_PRONOUNS = [("he", True), ("she", True), ("it", True), ("they", False), ("we", False), ("I", False)]
OBJECT_PRONOUNS = ["him", "her", "it", "them", "us", "me"]

TRANSITIVE = [  # (base, past, 3rd singular)
    ("see", "saw", "sees"), ("plan", "planned", "plans"), ("book", "booked", "books"),
    ("run", "ran", "runs"), ("visit", "visited", "visits"), ("call", "called", "calls"),
    ("help", "helped", "helps"), ("study", "studied", "studies"), ("design", "designed", "designs"),
    ("change", "changed", "changes"), ("answer", "answered", "answers"),
    ("record", "recorded", "records"), ("test", "tested", "tests"), ("watch", "watched", "watches"),
    ("order", "ordered", "orders"), ("review", "reviewed", "reviews"), ("fund", "funded", "funds"),
    ("check", "checked", "checks"), ("show", "showed", "shows"), ("paint", "painted", "paints"),
    ("move", "moved", "moves"), ("build", "built", "builds"), ("buy", "bought", "buys"),
    ("sell", "sold", "sells"), ("find", "found", "finds"), ("like", "liked", "likes"),
    ("need", "needed", "needs"), ("write", "wrote", "writes"), ("read", "read", "reads"),
    ("open", "opened", "opens"), ("close", "closed", "closes"), ("join", "joined", "joins"),
    ("lead", "led", "leads"), ("support", "supported", "supports"), ("meet", "met", "meets"),
    ("hire", "hired", "hires"), ("fix", "fixed", "fixes"), ("carry", "carried", "carries"),
    ("follow", "followed", "follows"), ("teach", "taught", "teaches"), ("love", "loved", "loves"),
    ("want", "wanted", "wants"), ("use", "used", "uses"), ("share", "shared", "shares"),
]
SAYING = [  # take a that-clause as ARG1
    ("say", "said", "says"), ("think", "thought", "thinks"), ("believe", "believed", "believes"),
    ("know", "knew", "knows"), ("claim", "claimed", "claims"), ("hope", "hoped", "hopes"),
    ("report", "reported", "reports"), ("suggest", "suggested", "suggests"),
    ("announce", "announced", "announces"), ("fear", "feared", "fears"), ("argue", "argued", "argues"),
    ("explain", "explained", "explains"), ("notice", "noticed", "notices"),
]
AGENTIVE = [  # intransitive, subject is ARG0
    ("sleep", "slept", "sleeps"), ("work", "worked", "works"), ("walk", "walked", "walks"),
    ("laugh", "laughed", "laughs"), ("talk", "talked", "talks"), ("swim", "swam", "swims"),
    ("wait", "waited", "waits"), ("travel", "traveled", "travels"), ("smile", "smiled", "smiles"),
]
UNACCUSATIVE = [  # intransitive, subject is ARG1
    ("arrive", "arrived", "arrives"), ("fall", "fell", "falls"), ("grow", "grew", "grows"),
    ("appear", "appeared", "appears"), ("disappear", "disappeared", "disappears"),
    ("rise", "rose", "rises"), ("stay", "stayed", "stays"), ("return", "returned", "returns"),
]
MODALS = ["will", "can", "should", "may", "must", "might", "could", "would"]
MANNER_ADVERBS = "quickly slowly carefully quietly happily badly easily suddenly".split()
TIME_ADVERBS = "often recently soon later again always sometimes".split()
DISCOURSE_ADVERBS = ["However", "Meanwhile", "Still", "Instead", "Then"]
CONJUNCTIONS = ["and", "but", "or"]


# ---------------------------------------------------------------- public API


def generate_demo(n: int, seed: int) -> list[Sentence]:
    """Generate ``n`` demo sentences.

    Args:
        n: number of sentences.
        seed: the random seed; equal seeds give equal sentences.

    Returns:
        sentences with words, pos, tree, entities and SRL (no dependencies); ``source`` is
        "demo-{seed}:{i}" with i 1-based.
    """
    rng = random.Random(seed)
    sentences = []
    for i in range(n):
        sentence = _sample_sentence(rng)
        sentence.source = f"demo-{seed}:{i + 1}"
        sentences.append(sentence)
    return sentences


def ensure_demo_corpus(
    folder: str | os.PathLike, seed: int = 0, sizes: dict[str, int] | None = None
) -> dict[str, Path]:
    """Write ``{split}.gold_conll`` for each split into ``folder`` unless already there.

    Args:
        folder: where to write (created when missing).
        seed: corpus seed; each split uses its own seed derived from it and the split name.
        sizes: sentences per split (default :data:`DEMO_SIZES`: train 1200, dev 200, test 200).

    Returns:
        split name -> file path. ``manifest.json`` records seed, sizes, grammar version and the
        files' SHA-256; the files are regenerated (atomically) when any of these differ.
    """
    folder = Path(folder)
    sizes = dict(DEMO_SIZES if sizes is None else sizes)
    paths = {split: folder / f"{split}.gold_conll" for split in sizes}
    wanted = {"version": DEMO_VERSION, "seed": seed, "sizes": sizes}
    if _manifest_matches(folder / "manifest.json", wanted, paths):
        return paths
    hashes = {}
    for split, size in sizes.items():
        sentences = generate_demo(size, split_seed(seed, split))
        write_conll2012(sentences, paths[split], doc_id=f"demo/{split}")
        hashes[split] = file_sha256(paths[split])
    _write_json(folder / "manifest.json", {**wanted, "sha256": hashes})
    return paths


def split_seed(seed: int, split: str) -> int:
    """The seed of one split: the first 8 bytes of SHA-256("{seed}:{split}")."""
    digest = hashlib.sha256(f"{seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _manifest_matches(manifest: Path, wanted: dict, paths: dict[str, Path]) -> bool:
    """True when the manifest records ``wanted`` and every file has its recorded hash."""
    if not manifest.is_file():
        return False
    recorded = json.loads(manifest.read_text(encoding="utf-8"))
    if {key: recorded.get(key) for key in wanted} != wanted:
        return False
    hashes = recorded.get("sha256", {})
    return all(path.is_file() and hashes.get(split) == file_sha256(path) for split, path in paths.items())


def _write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------- sampling one sentence


def _sample_sentence(rng: random.Random) -> Sentence:
    """Sample sentences until one has MIN_WORDS..MAX_WORDS words."""
    while True:
        grammar = _Grammar(rng)
        tree = grammar.sentence()
        if MIN_WORDS <= len(tree.leaves()) <= MAX_WORDS:
            return grammar.to_sentence(tree)


def _leaf(tag: str, word: str) -> nltk.Tree:
    """A preterminal (tag word)."""
    return nltk.Tree(tag, [word])


class _Grammar:
    """Builds one tree top-down, noting which nodes are entities and SRL arguments.

    ``entities`` holds (node, label); ``frames`` holds (verb preterminal, [(node, role)]).
    Spans are computed from node identity once the tree is finished (:meth:`to_sentence`).
    """

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.entities: list[tuple[nltk.Tree, str]] = []
        self.frames: list[tuple[nltk.Tree, list[tuple[nltk.Tree, str]]]] = []

    def chance(self, p: float) -> bool:
        """True with probability p."""
        return self.rng.random() < p

    # ---------------- clauses

    def sentence(self) -> nltk.Tree:
        """(TOP (S ... (. .))), sometimes two clauses joined by ', and/but'."""
        if self.chance(0.12):
            first, second = self.clause(depth=1), self.clause(depth=1)
            top = nltk.Tree("S", [first, _leaf(",", ","), _leaf("CC", self.rng.choice(CONJUNCTIONS)), second])
        else:
            top = self.clause(depth=0)
        top.append(_leaf(".", "."))
        tree = nltk.Tree("TOP", [top])
        first = tree.treepositions("leaves")[0]
        tree[first] = tree[first][0].upper() + tree[first][1:]  # "the" -> "The"; names unchanged
        return tree

    def clause(self, depth: int) -> nltk.Tree:
        """(S [ADVP ,] NP [ADVP] VP); ``depth`` counts enclosing clauses."""
        children, shared = [], []
        if depth == 0 and self.chance(0.08):
            advp = nltk.Tree("ADVP", [_leaf("RB", self.rng.choice(DISCOURSE_ADVERBS))])
            children += [advp, _leaf(",", ",")]
            shared.append((advp, "ARGM-DIS"))
        subject, singular = self.noun_phrase("subject", depth)
        children.append(subject)
        if self.chance(0.1):
            advp = nltk.Tree("ADVP", [_leaf("RB", self.rng.choice(TIME_ADVERBS))])
            children.append(advp)
            shared.append((advp, "ARGM-TMP"))
        children.append(self.verb_phrase(subject, singular, shared, depth))
        return nltk.Tree("S", children)

    def verb_phrase(self, subject, singular: bool, shared: list, depth: int) -> nltk.Tree:
        """A finite VP: past, present or modal + base form; sometimes two coordinated VPs."""
        tense = self.rng.choice(["past", "past", "present", "modal"])
        if tense == "modal":
            modal = _leaf("MD", self.rng.choice(MODALS))
            children, shared = [modal], shared + [(modal, "ARGM-MOD")]
            if self.chance(0.15):
                negation = _leaf("RB", "not")
                children.append(negation)
                shared.append((negation, "ARGM-NEG"))
            children.append(self.coordinated_vp("VB", subject, shared, depth))
            return nltk.Tree("VP", children)
        if tense == "past":
            return self.coordinated_vp("VBD", subject, shared, depth)
        return self.coordinated_vp("VBZ" if singular else "VBP", subject, shared, depth)

    def coordinated_vp(self, tag: str, subject, shared: list, depth: int) -> nltk.Tree:
        """One simple VP, or (VP VP (CC and) VP) sharing subject and modifiers."""
        if depth < 2 and self.chance(0.1):
            first = self.simple_vp(tag, subject, shared, depth + 1)
            second = self.simple_vp(tag, subject, shared, depth + 1)
            return nltk.Tree("VP", [first, _leaf("CC", self.rng.choice(["and", "but"])), second])
        return self.simple_vp(tag, subject, shared, depth)

    def simple_vp(self, tag: str, subject, shared: list, depth: int) -> nltk.Tree:
        """(VP verb [NP | SBAR] PP* [ADVP]) and its SRL frame."""
        kind = self.verb_kind(depth)
        verb = _leaf(tag, self.verb_form(self.rng.choice(kind), tag))
        subject_role = "ARG1" if kind is UNACCUSATIVE else "ARG0"
        args = [(subject, subject_role)] + shared + [(verb, "V")]
        children = [verb]
        if kind is TRANSITIVE:
            obj, _ = self.noun_phrase("object", depth)
            children.append(obj)
            args.append((obj, "ARG1"))
        for pp, role in self.adjunct_pps(depth):
            children.append(pp)
            args.append((pp, role))
        if kind is SAYING:
            sbar = self.that_clause(depth)
            children.append(sbar)
            args.append((sbar, "ARG1"))
        elif self.chance(0.1):
            advp = nltk.Tree("ADVP", [_leaf("RB", self.rng.choice(MANNER_ADVERBS))])
            children.append(advp)
            args.append((advp, "ARGM-MNR"))
        self.frames.append((verb, args))
        return nltk.Tree("VP", children)

    def verb_kind(self, depth: int) -> list:
        """Pick a verb class; clauses nest at most two deep."""
        r = self.rng.random()
        if r < 0.18 and depth < 2:
            return SAYING
        if r < 0.3:
            return self.rng.choice([AGENTIVE, UNACCUSATIVE])
        return TRANSITIVE

    def verb_form(self, entry: tuple[str, str, str], tag: str) -> str:
        """The form of a (base, past, 3sg) verb for a PTB tag."""
        base, past, third = entry
        return {"VBD": past, "VBZ": third}.get(tag, base)

    def that_clause(self, depth: int) -> nltk.Tree:
        """(SBAR (IN that) S), 'that' sometimes left out."""
        clause = self.clause(depth + 1)
        if self.chance(0.7):
            return nltk.Tree("SBAR", [_leaf("IN", "that"), clause])
        return nltk.Tree("SBAR", [clause])

    def adjunct_pps(self, depth: int) -> list[tuple[nltk.Tree, str]]:
        """0-2 location / time PPs with their ARGM roles."""
        pps = []
        p = 0.35 if depth == 0 else 0.2
        while len(pps) < 2 and self.chance(p):
            pps.append(self.location_pp() if self.chance(0.5) else self.time_pp())
            p = 0.15
        return pps

    def location_pp(self) -> tuple[nltk.Tree, str]:
        """(PP (IN in/at/near) place) as ARGM-LOC; the place is a name or 'the NN'."""
        if self.chance(0.5):
            place = self.name(self.rng.choice(["GPE", "GPE", "LOC", "ORG"]))
        else:
            place = nltk.Tree("NP", [_leaf("DT", "the"), _leaf("NN", self.rng.choice(PLACE_NOUNS))])
        return nltk.Tree("PP", [_leaf("IN", self.rng.choice(LOC_PREPS)), place]), "ARGM-LOC"

    def time_pp(self) -> tuple[nltk.Tree, str]:
        """(PP (IN on) (NP (NNP Monday))) or (PP (IN during) (NP (DT the) (NN meeting))) as ARGM-TMP."""
        if self.chance(0.4):
            day = nltk.Tree("NP", [_leaf("NNP", self.rng.choice(DAYS))])
            return nltk.Tree("PP", [_leaf("IN", "on"), day]), "ARGM-TMP"
        when = nltk.Tree("NP", [_leaf("DT", "the"), _leaf("NN", self.rng.choice(TIME_NOUNS))])
        return nltk.Tree("PP", [_leaf("IN", self.rng.choice(TIME_PREPS)), when]), "ARGM-TMP"

    # ---------------- noun phrases

    def noun_phrase(self, role: str, depth: int) -> tuple[nltk.Tree, bool]:
        """A subject or object NP and whether it is third person singular."""
        r = self.rng.random()
        if r < 0.15:
            return self.pronoun(role)
        if r < 0.35:
            labels = ["PERSON", "PERSON", "ORG"] if role == "subject" else ["PERSON", "ORG", "GPE", "LOC"]
            return self.name(self.rng.choice(labels)), True
        if r < 0.41 and depth < 2:
            first, _ = self.common_np(depth + 1)
            second, _ = self.noun_phrase(role, depth + 1)
            return nltk.Tree("NP", [first, _leaf("CC", "and"), second]), False
        return self.common_np(depth)

    def pronoun(self, role: str) -> tuple[nltk.Tree, bool]:
        """(NP (PRP he)) in the right case."""
        if role == "subject":
            word, singular = self.rng.choice(SUBJECT_PRONOUNS)
        else:
            word, singular = self.rng.choice(OBJECT_PRONOUNS), True
        return nltk.Tree("NP", [_leaf("PRP", word)]), singular

    def name(self, label: str) -> nltk.Tree:
        """(NP (NNP ...)+) from the gazetteer of ``label``, recorded as an entity."""
        if label == "PERSON":
            words = [self.rng.choice(LAST_NAMES)]
            if self.chance(0.6):
                words.insert(0, self.rng.choice(FIRST_NAMES))
        else:
            words = self.rng.choice({"ORG": ORGS, "GPE": GPES, "LOC": LOCS}[label])
        children = [_leaf("NNP", word) for word in words]
        if label == "LOC" and words[-1] in ("Alps", "Mountains"):
            children = [_leaf("DT", "the")] + [_leaf("NNP", w) for w in words[:-1]] + [_leaf("NNPS", words[-1])]
        np = nltk.Tree("NP", children)
        self.entities.append((np, label))
        return np

    def common_np(self, depth: int) -> tuple[nltk.Tree, bool]:
        """(NP [DT] JJ* NN(S)), sometimes with an (PP of/with NP) attached."""
        singular = self.chance(0.7)
        noun = self.rng.choice(NOUNS)[0 if singular else 1]
        children = []
        if singular or self.chance(0.6):
            children.append(_leaf("DT", self.rng.choice(SINGULAR_DT if singular else PLURAL_DT)))
        while len(children) < 3 and self.chance(0.3):
            children.append(_leaf("JJ", self.rng.choice(ADJECTIVES)))
        children.append(_leaf("NN" if singular else "NNS", noun))
        np = nltk.Tree("NP", children)
        if depth < 2 and self.chance(0.15):
            inner, _ = self.noun_phrase("object", depth + 1)
            np = nltk.Tree("NP", [np, nltk.Tree("PP", [_leaf("IN", self.rng.choice(NP_PREPS)), inner])])
        return np, singular

    # ---------------- spans

    def to_sentence(self, tree: nltk.Tree) -> Sentence:
        """The Sentence of a finished tree, with entity and SRL spans from node identity."""
        spans: dict[int, tuple[int, int]] = {}
        _node_spans(tree, 0, spans)
        words = tree.leaves()
        entities = sorted((*spans[id(node)], label) for node, label in self.entities)
        frames = sorted(((spans[id(verb)][0], args) for verb, args in self.frames), key=lambda pair: pair[0])
        return Sentence(
            words=words,
            pos=[tag for _, tag in tree.pos()],
            tree=tree,
            entities=entities,
            predicates=[index for index, _ in frames],
            arguments=[sorted((*spans[id(node)], role) for node, role in args) for _, args in frames],
        )


def _node_spans(tree: nltk.Tree, start: int, spans: dict[int, tuple[int, int]]) -> int:
    """Fill ``spans[id(node)] = (start, end_exclusive)`` for every node; return the end."""
    end = start
    for child in tree:
        end = end + 1 if isinstance(child, str) else _node_spans(child, end, spans)
    spans[id(tree)] = (start, end)
    return end
