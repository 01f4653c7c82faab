"""Every size of the HoVer example, with its source (the one place these values are stated).

The app (``app.py``, ``retrieval.py``, ``run.py``), the prompts (``prompts.py``) and the scenario
(``scenario.py``) read these values; ``scripts/make_example_sizes.py`` writes the table of
``docs/example-sizes.md`` from :data:`SIZES`.
"""

from __future__ import annotations

from examples.common.sizes import NOT_FOUND, SAME_AS, Size

__all__ = ["SIZES", "DEFAULT_MESSAGES", "PASSAGES_PER_QUERY", "PASSAGE_SECTIONS",
           "MAX_ROUNDS", "REPLY_MEDIAN", "REPLY_SIGMA", "N_EXAMPLES", "N_DISTRACTOR_CLAIMS", "TASKS"]

_PBKV_PAPER = ("the PBKV paper: agents share \"the system prompt, tool/agent descriptions, and the history "
               "accumulated by upstream agents\"")
_LANGGRAPH = ("LangGraph's message state: `add_messages` \"merges two lists of messages\" and keeps the state "
              "\"append-only\" (https://reference.langchain.com/python/langgraph/graph/message), so in the "
              "usual `MessagesState` pattern every node's call sees the whole list")

#: Message convention of a run without ``--messages`` (``prompts.CONVENTIONS`` puts it first).
DEFAULT_MESSAGES = "shared"
#: Passages the retrieval tool returns per query.
PASSAGES_PER_QUERY = 5
#: Section sentences of a synthesised passage (``retrieval.synthesise_passage``), drawn uniformly
#: in this range; each names the title, a topic and two years (a lead paragraph of a few sentences).
PASSAGE_SECTIONS = (4, 8)
#: Retrieval rounds before the app stops looping (the hop budget).
MAX_ROUNDS = 6
#: Median tokens of each free-text part of a reply (log-normal, :data:`REPLY_SIGMA`); ``*_per_hop``
#: parts are multiplied by the claim's hop count, ``summary_note`` is per retrieved passage.
REPLY_MEDIAN = {
    "decomposer_per_hop": 30,
    "query_reasoning": 40,
    "summary_note": 45,
    "verifier_more": 50,
    "verifier_done_per_hop": 35,
    "unknown_request": 60,
}
#: Log-normal sigma of every reply part (``textgen.lognormal_tokens``' default).
REPLY_SIGMA = 0.35
#: Held-out claims rendered as worked examples in the system prompts.
N_EXAMPLES = 3
#: Claims (outside the task split) whose titles join the index as distractors.
N_DISTRACTOR_CLAIMS = 400
#: (training, test) claims of a full run and of ``--quick``.
TASKS = {"full": (150, 150), "quick": (40, 40)}

_REPLY_SOURCE = (NOT_FOUND + " for the visible answer of one agent step of a Qwen3-class model; the app's "
                 "value is kept. In reasoning mode the thinking part is decode work but not context: Qwen3's "
                 "chat template drops earlier turns' thinking from the history (QwenLM/Qwen3 discussion #1398, "
                 "https://github.com/QwenLM/Qwen3/discussions/1398); the simulator does not add hidden "
                 "thinking tokens.")

SIZES: tuple[Size, ...] = (
    Size("DEFAULT_MESSAGES", DEFAULT_MESSAGES, "", "what each agent's prompt holds: one shared system prompt, "
         "the claim's accumulated messages (every earlier call's input and reply), the agent's instruction "
         "(`--messages per-agent`: the agent's own system prompt and its slice of the state)",
         f"{_PBKV_PAPER}; {_LANGGRAPH}"),
    Size("PASSAGES_PER_QUERY", PASSAGES_PER_QUERY, "passages", "retrieval depth: passages the search tool "
         "returns per query",
         "HoVer baseline (Jiang et al. 2020, https://github.com/hover-nlp/hover README): the top-20 TF-IDF "
         "documents go to neural document retrieval, whose top-5 documents go on to sentence selection "
         "(`--sent_retrieve_range=5`)"),
    Size("PASSAGE_SECTIONS", PASSAGE_SECTIONS, "sentences", "length of one passage: a title sentence plus "
         "this many section sentences (each names the title, a topic and two years)",
         NOT_FOUND + " for the length of HoVer's Wikipedia paragraphs (HoVer uses the October 2017 dump "
         "processed for HotpotQA, https://hotpotqa.github.io/wiki-readme.html, which gives no length "
         "statistics); the app's value is kept", is_range=True),
    Size("MAX_ROUNDS", MAX_ROUNDS, "rounds", "retrieval rounds before the app stops looping",
         "The app's budget (HoVer claims need evidence from up to four articles, Jiang et al. 2020, "
         "https://arxiv.org/abs/2011.03088; the budget leaves two rounds for missed articles)"),
    Size("REPLY_SIGMA", REPLY_SIGMA, "", "log-normal sigma of every reply part", _REPLY_SOURCE),
    *(Size(f"REPLY_MEDIAN[{part}]", median, "tokens", f"median length of the reply part `{part}`",
           f"{SAME_AS} `REPLY_SIGMA`")
      for part, median in REPLY_MEDIAN.items()),
    Size("N_EXAMPLES", N_EXAMPLES, "claims", "held-out worked examples in the system prompt(s)",
         NOT_FOUND + "; the app's value (few-shot prompting with a handful of examples)"),
    Size("N_DISTRACTOR_CLAIMS", N_DISTRACTOR_CLAIMS, "claims", "claims whose titles join the index as "
         "distractors", "The app's value (HoVer's own corpus is all of Wikipedia's lead paragraphs; the "
         "offline index holds the task titles plus these distractors)"),
    Size("TASKS[full]", TASKS["full"], "claims", "(training, test) claims of a full run",
         "The app's value: the main job's budget (at most 4 minutes after setup on a 2-core "
         "machine). 150 test claims still keep the paper's 72 workflows in flight, so the paper setup "
         "stays memory-short; a run this short spends more of its time filling and draining, so "
         "policies differ less than at 300/300 (`--train 300 --test 300`)"),
    Size("TASKS[quick]", TASKS["quick"], "claims", "(training, test) claims of `--quick` (CI)",
         "The app's value (CI budget)"),
)
