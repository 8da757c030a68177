"""Tidy CSV reader."""

import numpy as np
import pytest

from opptune.daemon.tidy import TidyError, median_reps, read_tidy

HEAD = "platform,workload,input,variant,cores,freq_mhz,rep,time_s,energy_j,cycles,note\n"


def write(tmp_path, body, head=HEAD):
    path = tmp_path / "d.csv"
    path.write_text(head + body)
    return path


def test_groups_counters_and_medians(tmp_path):
    path = write(tmp_path, "b,w,100,v,1,1000,0,10,5,7,x\nb,w,100,v,1,1000,1,12,,9,y\n"
                           "b,w,100,v,2,1000,0,6,3,4,z\nb,w2,,v,1,,0,3,,,\n")
    groups = read_tidy(path)
    assert [g.key for g in groups] == [("b", "w", "100", "v"), ("b", "w2", "", "v")]
    g = groups[0]
    assert g.obs.input_size.tolist() == [100.0] * 3
    assert "cycles" in g.obs.counters and "note" not in g.obs.counters
    assert g.lines.tolist() == [2, 3, 4]
    m = median_reps(g.obs)
    assert m.cores.tolist() == [1.0, 2.0]
    assert m.time_s.tolist() == [11.0, 6.0]
    assert m.energy_j.tolist() == [5.0, 3.0]          # NaN ignored in the median
    assert np.isnan(groups[1].obs.freq_mhz[0])


def test_missing_column_is_named(tmp_path):
    path = write(tmp_path, "b,w,1,v,1,0,10\n", head="platform,workload,input,variant,cores,rep,time_s\n")
    with pytest.raises(TidyError, match=r"d.csv: line 1: missing column\(s\) freq_mhz"):
        read_tidy(path)


def test_non_numeric_value_names_line_and_column(tmp_path):
    path = write(tmp_path, "b,w,1,v,1,1000,0,10,,,\nb,w,1,v,2,1000,0,fast,,,\n")
    with pytest.raises(TidyError, match=r"line 3: column 'time_s': 'fast' is not a number"):
        read_tidy(path)


def test_ragged_row_and_missing_file(tmp_path):
    with pytest.raises(TidyError, match="line 2: 3 fields"):
        read_tidy(write(tmp_path, "b,w,1\n"))
    with pytest.raises(TidyError, match="cannot open"):
        read_tidy(tmp_path / "nope.csv")


def test_reads_shipped_dataset():
    from pathlib import Path
    groups = read_tidy(Path(__file__).resolve().parent.parent / "data/armpm_xu3_parsec/data.csv")
    assert len(groups) == 9 and all(len(median_reps(g.obs)) == 6 for g in groups)


def test_header_without_rows_is_an_error(tmp_path):
    with pytest.raises(TidyError, match=r"d.csv: no data rows after the header line"):
        read_tidy(write(tmp_path, "\n\n"))


def test_byte_order_mark_is_allowed(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEAD + "b,w,1,v,1,,0,10,,,\n").encode())
    assert read_tidy(path)[0].obs.time_s.tolist() == [10.0]


def test_zero_time_is_an_error_or_missing_on_request(tmp_path):
    path = write(tmp_path, "b,w,1,v,1,,0,10,,,\nb,w,1,v,2,,0,0,,,\n")
    with pytest.raises(TidyError, match=r"d.csv: line 3: column 'time_s': '0'"):
        read_tidy(path)
    assert np.isnan(read_tidy(path, zero_time="missing")[0].obs.time_s[1])


def test_without_input_and_rep_each_row_is_a_run_of_one_input(tmp_path):
    path = write(tmp_path, "b,w,,1,1000,10\nb,w,,1,1000,12\nb,w,,2,1000,6\n",
                 head="platform,workload,variant,cores,freq_mhz,time_s\n")
    (g,) = read_tidy(path)
    assert g.key == ("b", "w", "", "") and g.label == "b/w"
    m = median_reps(g.obs)
    assert m.cores.tolist() == [1.0, 2.0] and m.time_s.tolist() == [11.0, 6.0]


def test_size_column_names_the_input_without_an_input_column(tmp_path):
    # the layout eval-mpet reads (data/bench_suite_*): size, no input, no rep
    path = write(tmp_path, "b,w,,1,10,small,1000,1\nb,w,,1,4,large,1000,1\n",
                 head="platform,workload,variant,cores,time_s,size,freq_mhz,R\n")
    groups = read_tidy(path)
    assert [g.key for g in groups] == [("b", "w", "small", ""), ("b", "w", "large", "")]
    assert "size" not in groups[0].obs.counters and "R" in groups[0].obs.counters


def test_reads_shipped_bench_suite_set():
    from pathlib import Path
    groups = read_tidy(Path(__file__).resolve().parent.parent / "data/bench_suite_rpi4/data.csv")
    assert len(groups) == 13
    assert all(g.key[2] == "small" and median_reps(g.obs).cores.tolist() == [1, 2, 3, 4]
               for g in groups)
