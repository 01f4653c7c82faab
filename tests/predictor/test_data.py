"""Samples, masking after END, vocabulary and workflow split (pbkv_train.data)."""

import pytest
from .predictor_fixtures import write_workflows

from pbkv_contract.hints import END_AGENT, UNKNOWN_AGENT
from pbkv_train.data import END, PAD, UNK, Vocab, build_samples, build_vocab, load_workflows, split_workflows


def test_targets_put_end_after_last_step_and_mask_everything_after_it(tmp_path):
    path = tmp_path / "t.jsonl"
    write_workflows(path, "app", [("w1", ["a", "b", "c"])])
    wfs = load_workflows([path])
    vocab = build_vocab("app", wfs)
    a, b, c = (vocab.encode(x) for x in "abc")
    s = build_samples(wfs, vocab, k=3, max_prefix=4)
    # Step 0 (a): next = b, c, END. Step 1 (b): c, END, masked. Step 2 (c): END, masked, masked.
    assert s.targets.tolist() == [[b, c, END], [c, END, PAD], [END, PAD, PAD]]
    assert s.mask.tolist() == [[True, True, True], [True, True, False], [True, False, False]]
    assert s.current.tolist() == [a, b, c]
    assert s.prefix.tolist() == [[PAD] * 4, [PAD, PAD, PAD, a], [PAD, PAD, a, b]]
    assert s.prefix_len.tolist() == [0, 1, 2]


def test_workflow_without_end_record_masks_instead_of_predicting_end(tmp_path):
    path = tmp_path / "t.jsonl"
    write_workflows(path, "app", [("w1", ["a", "b"])], ended=False)
    wfs = load_workflows([path])
    s = build_samples(wfs, build_vocab("app", wfs), k=2, max_prefix=2)
    assert s.mask.tolist() == [[True, False], [False, False]]
    assert END not in s.targets[s.mask].tolist()


def test_prefix_keeps_only_the_newest_agents(tmp_path):
    path = tmp_path / "t.jsonl"
    write_workflows(path, "app", [("w1", ["a", "b", "c", "d"])])
    wfs = load_workflows([path])
    vocab = build_vocab("app", wfs)
    s = build_samples(wfs, vocab, k=1, max_prefix=2)
    assert s.prefix[3].tolist() == [vocab.encode("b"), vocab.encode("c")]
    assert s.prefix_len[3] == 2 and s.step[3] == 3


def test_vocab_layout_and_unknown_agents_map_to_unk():
    vocab = Vocab("app", ["z", "a", "a", END_AGENT])
    assert vocab.tokens == ["<PAD>", UNKNOWN_AGENT, END_AGENT, "a", "z"]
    assert vocab.encode("never-seen") == UNK
    assert Vocab.from_json(vocab.to_json()).tokens == vocab.tokens


def test_split_is_by_workflow_seeded_and_disjoint(tmp_path):
    path = tmp_path / "t.jsonl"
    write_workflows(path, "app", [(f"w{i}", ["a", "b"]) for i in range(20)])
    wfs = load_workflows([path])
    s1, s2 = split_workflows(wfs, seed=3), split_workflows(wfs, seed=3)
    ids = [[w.workflow_id for w in part] for part in (s1.train, s1.val, s1.test)]
    assert ids == [[w.workflow_id for w in part] for part in (s2.train, s2.val, s2.test)]
    assert (len(ids[0]), len(ids[1]), len(ids[2])) == (14, 3, 3)
    assert len(set(ids[0]) | set(ids[1]) | set(ids[2])) == 20
    assert split_workflows(wfs, seed=4).test != s1.test


def test_mixed_apps_need_an_app_choice(tmp_path):
    write_workflows(tmp_path / "a.jsonl", "one", [("w1", ["a"])])
    write_workflows(tmp_path / "b.jsonl", "two", [("w2", ["b"])])
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    with pytest.raises(ValueError, match="mix apps"):
        load_workflows(paths)
    assert [w.workflow_id for w in load_workflows(paths, app="two")] == ["w2"]


def test_truncated_trace_line_is_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    write_workflows(path, "app", [("w1", ["a", "b"])])
    with open(path, "a") as fh:
        fh.write('{"type":"invocation","v":1,"app":"app","workflow_id":"w1","st')
    wfs = load_workflows([path])
    assert wfs[0].agents == ("a", "b")


def test_internal_calls_are_left_out_of_training_workflows_but_kept_in_the_trace(tmp_path):
    from pbkv_contract.trace import TraceWriter, WorkflowEndRecord, read_trace
    from .predictor_fixtures import invocation

    path = tmp_path / "t.jsonl"
    steps = ["speaker_selector", "planner", "speaker_selector", "speaker_selector", "coder", "speaker_selector", "tester"]
    with TraceWriter(path) as w:
        for step, agent in enumerate(steps):
            record = invocation("swe", "w1", step, agent)
            record.internal = True if agent == "speaker_selector" else None
            w.write(record)
        w.write(WorkflowEndRecord(app="swe", workflow_id="w1", t=9.0))
    [wf] = load_workflows([path])
    assert wf.agents == ("planner", "coder", "tester") and wf.ended
    samples = build_samples([wf], build_vocab("swe", [wf]), k=1)
    assert len(samples) == 3  # one per agent step, the selector's 4 calls are not samples
    assert sum(1 for r in read_trace(path) if getattr(r, "internal", None)) == 4  # replay still sees them
