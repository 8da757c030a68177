"""How fits are shown to people: parameters of one model, weights of a combination."""

from opptune.daemon.status_view import params_text


def test_a_model_shows_its_numeric_parameters():
    assert params_text("amdahl", {"parallel_fraction": 0.91234, "note": "x", "smt": True}) == \
        "parallel_fraction=0.912"


def test_a_combination_shows_its_members_weights_only():
    params = {"w.amdahl": 0.25, "w.usl+anchor": 0.75, "amdahl.parallel_fraction": 0.9,
              "usl.contention": 0.1}
    assert params_text("combo", params) == "amdahl=0.25, usl+anchor=0.75"


def test_no_parameters_is_an_empty_text():
    assert params_text("hold", None) == ""
