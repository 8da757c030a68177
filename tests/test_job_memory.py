"""The job tracker's memory of ended jobs is bounded: a daemon that runs for months ends
millions of jobs, and kept each id for its life."""

from opptune.daemon import jobs as jobs_module
from opptune.daemon.store import ResultIn
from opptune.shared.records import RunRecord
from test_job_send_order import JOB, tracker


def run(job_id, seq):
    rec = RunRecord(platform="p1", workload="pi_integrate", input="small", cores=1, cpus=[0],
                    threads=1, rep=seq, time_s=1.0, wall_s=1.0)
    return ResultIn(f"m-{job_id}-{seq}", "a1", job_id, seq, rec, rec.to_dict())


def test_ended_jobs_are_remembered_newest_first_and_late_results_ask_no_second_fit(
        tmp_path, monkeypatch):
    """Jobs end one after another; the tracker keeps the newest COMPLETE_KEPT, and none of
    their messages' ids. Results of
    the newest job sent again (an agent that missed the ack) ask for no second fit; those of
    a job forgotten are counted afresh, as after a restart, and end it again."""
    monkeypatch.setattr(jobs_module, "COMPLETE_KEPT", 4, raising=False)
    tracker_, store, _ = tracker(tmp_path)
    fits = []
    tracker_.on_done = lambda job_id, agent: fits.append(job_id)
    ids = [f"j{i}" for i in range(7)]
    for job_id in ids:
        tracker_.send("a1", {**JOB, "job_id": job_id})
        store.insert_results([run(job_id, 0)], 1.0)
        tracker_.results_stored({job_id: [1, "a1", 1, None]}, 1.0)
    assert fits == ids
    assert [store.job(j)["state"] for j in ids] == ["done"] * 7
    assert list(tracker_._complete) == ids[-4:]
    assert tracker_._msgs == {}  # the ids of the job messages, kept for a refusal

    tracker_.results_stored({ids[-1]: [1, "a1", 1, None]}, 2.0)
    assert fits == ids
    assert store.job(ids[-1])["state"] == "done"
    tracker_.results_stored({ids[0]: [1, "a1", 1, None]}, 2.0)
    assert fits == ids + [ids[0]] and store.job(ids[0])["state"] == "done"
    assert list(tracker_._complete) == ids[-3:] + [ids[0]]
