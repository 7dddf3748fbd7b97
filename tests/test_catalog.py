"""Tests of hardware_catalog: the shipped data, the loader's validation, derived numbers.

Published figures are cited where they are used: [SW] Patel et al., Splitwise, ISCA 2024;
[TS] Jiang et al., ThunderServe, MLSys 2025 (see /work/shared/reference/FACTS.md).
"""

import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hardware_catalog
from hardware_catalog import (
    GPU,
    LLM,
    Catalog,
    CatalogError,
    CatalogValidationError,
    Machine,
    UnknownNameError,
    load_catalog,
)

DATA = Path(hardware_catalog.__file__).parent / "data"


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


def all_entries(cat: Catalog) -> list:
    return [*cat.gpus.values(), *cat.machines.values(), *cat.models.values()]


# --- the shipped catalog ---------------------------------------------------------------


def test_default_catalog_has_the_contract_names(cat):
    assert {"a100-80gb", "h100-80gb", "h200-141gb", "b200", "mi300x", "l40s",
            "a6000", "a5000", "a40", "rtx3090ti"} <= set(cat.gpus)
    assert {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "mi300x-8x", "l40s-8x",
            "a40-8x", "a6000-4x", "a5000-4x", "rtx3090ti-4x"} <= set(cat.machines)
    assert {"llama2-70b", "bloom-176b", "llama-7b", "llama-13b", "llama-30b",
            "llama3-8b", "llama3-70b"} <= set(cat.models)
    assert isinstance(cat.gpu("a100-80gb"), GPU)
    assert isinstance(cat.machine("dgx-h100"), Machine)
    assert isinstance(cat.model("bloom-176b"), LLM)


def test_dicts_are_sorted_by_name_and_keyed_by_entry_name(cat):
    for entries in (cat.gpus, cat.machines, cat.models):
        assert list(entries) == sorted(entries)
        assert all(key == entry.name for key, entry in entries.items())


def test_every_entry_has_sources_and_as_of(cat):
    for entry in all_entries(cat):
        assert entry.sources and all(text.strip() for text in entry.sources.values()), entry.name
        assert re.fullmatch(r"\d{4}(-\d{2}-\d{2})?", entry.as_of), entry.name


def test_every_machine_references_a_known_gpu_and_prices_its_default_option(cat):
    for m in cat.machines.values():
        assert m.gpu in cat.gpus
        assert m.cost_usd_per_h == m.cost_options_usd_per_h[m.default_cost_option]


def test_default_load_is_cached_and_root_load_is_not(cat, tmp_path):
    assert load_catalog() is cat
    root = copy_catalog(tmp_path)
    assert load_catalog(root) is not load_catalog(root)
    assert set(load_catalog(str(root)).gpus) == set(cat.gpus)


def test_import_does_not_load_the_catalog():
    code = ("import hardware_catalog, hardware_catalog._loader as m; "
            "assert m._default_catalog.cache_info().currsize == 0")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_entries_are_frozen_and_hashable(cat):
    gpu = cat.gpu("a100-80gb")
    with pytest.raises(AttributeError):
        gpu.tdp_w = 1  # type: ignore[misc]
    assert {gpu: 1, cat.machine("dgx-a100"): 2, cat.model("llama2-70b"): 3}


# --- unknown names ---------------------------------------------------------------------


@pytest.mark.parametrize("kind, asked, suggested", [
    ("gpu", "h100", "h100-80gb"),
    ("machine", "dgx-h10", "dgx-h100"),
    ("model", "llama2-70", "llama2-70b"),
    ("gpu", "A100-80GB", "a100-80gb"),
])
def test_unknown_name_suggests_and_lists_known_names(cat, kind, asked, suggested):
    with pytest.raises(UnknownNameError) as info:
        getattr(cat, kind)(asked)
    message = str(info.value)
    assert message.startswith(f"unknown {kind} '{asked}' — did you mean '{suggested}'")
    assert "Known: " in message and "\n" not in message
    assert ", ".join(getattr(cat, kind + "s")) in message
    assert isinstance(info.value, KeyError) and isinstance(info.value, CatalogError)
    assert info.value.suggestions[0] == suggested


def test_unknown_name_without_a_close_match_still_lists_known_names(cat):
    with pytest.raises(UnknownNameError, match=r"^unknown gpu 'tpu-v5'\. Known: a100-80gb, "):
        cat.gpu("tpu-v5")


def test_unknown_name_error_survives_pickling(cat):
    with pytest.raises(UnknownNameError) as info:
        cat.model("gpt-5")
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(clone) == str(info.value) and clone.known == info.value.known


# --- validation of catalog files -------------------------------------------------------


def copy_catalog(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    shutil.copytree(DATA, root)
    return root


def edit(root: Path, rel: str, pattern: str, replacement: str) -> None:
    """Replace the one line of ``root/rel`` matching ``pattern`` (a regex)."""
    path = root / rel
    text, count = re.subn(pattern, replacement, path.read_text(), count=1, flags=re.M)
    assert count == 1, f"{pattern!r} not in {rel}"
    path.write_text(text)


BROKEN_FILES = [
    # (file, line pattern, replacement, words the one-line message must contain)
    ("gpus/a100-80gb.toml", r"^tdp_w = .*\n", "", ["missing field 'tdp_w'"]),
    ("machines/dgx-a100.toml", r"^rated_power_w = .*\n", "", ["missing field 'rated_power_w'"]),
    ("gpus/h100-80gb.toml", r"^hbm_bandwidth_gb_per_s = .*$", "hbm_bandwidth_gb_per_s = -5",
     ["field 'hbm_bandwidth_gb_per_s' must be > 0 (got -5)"]),
    ("machines/dgx-h100.toml", r'^gpu = .*$', 'gpu = "h100"',
     ["field 'gpu'", "unknown gpu 'h100'", "did you mean 'h100-80gb'"]),
    ("gpus/h100-80gb.toml", r"^tdp_w = ", "tdp_watts = ",
     ["unknown field 'tdp_watts'", "did you mean 'tdp_w'"]),
    ("gpus/a100-80gb.toml", r"^tdp_w = .*$", 'tdp_w = "400"',
     ["field 'tdp_w' must be a finite number (got str '400')"]),
    ("machines/dgx-a100.toml", r"^gpus_per_machine = .*$", "gpus_per_machine = 8.0",
     ["field 'gpus_per_machine' must be an integer (got float 8.0)"]),
    ("gpus/a40.toml", r'^intra_link = .*$', 'intra_link = "nvswitch"',
     ["field 'intra_link' must be one of 'nvlink', 'pcie', 'infinity-fabric' (got 'nvswitch')"]),
    ("machines/dgx-h100.toml", r"^gpu_power_fraction = .*$", "gpu_power_fraction = 1.2",
     ["field 'gpu_power_fraction' must be in (0, 1] (got 1.2)"]),
    ("machines/dgx-h100.toml", r'^default_cost_option = .*$', 'default_cost_option = "sw-table-2"',
     ["field 'default_cost_option'", "'sw-table-i', 'sw-table-v'"]),
    ("machines/dgx-h100.toml", r"^gpus_per_machine = ", "cost_usd_per_h = 38.0\ngpus_per_machine = ",
     ["field 'cost_usd_per_h' is taken from cost_options_usd_per_h[default_cost_option]"]),
    ("models/llama2-70b.toml", r"^n_layers = .*$", "n_layers = 8",
     ["field 'published_params'", "tolerance 5%", "n_layers"]),
    ("models/llama2-70b.toml", r"^n_kv_heads = .*$", "n_kv_heads = 7", ["field 'n_kv_heads' must divide n_heads"]),
    ("gpus/a100-80gb.toml", r"^tdp_w = \".*\n", "", ["field 'tdp_w' has no source", "[sources]"]),
    ("gpus/a100-80gb.toml", r"^tdp_w = \"", 'tdp_watts = "', ["sources key 'tdp_watts'", "'tdp_w'"]),
    ("gpus/a100-80gb.toml", r"^as_of = .*$", 'as_of = "2024-13-01"', ["field 'as_of' must be a date"]),
    ("gpus/a100-80gb.toml", r"^vendor = .*$", "vendor = nvidia", ["not valid TOML"]),
]


@pytest.mark.parametrize("rel, pattern, replacement, words", BROKEN_FILES,
                         ids=[" ".join(case[3][0].split()[:3]) for case in BROKEN_FILES])
def test_broken_file_raises_one_line_naming_file_and_field(tmp_path, rel, pattern, replacement, words):
    root = copy_catalog(tmp_path)
    edit(root, rel, pattern, replacement)
    with pytest.raises(CatalogValidationError) as info:
        load_catalog(root=root)
    message = str(info.value)
    assert message.startswith(f"{rel}: ") and "\n" not in message
    for word in words:
        assert word in message
    assert isinstance(info.value, ValueError) and isinstance(info.value, CatalogError)


def test_missing_subdirectory_is_named(tmp_path):
    root = copy_catalog(tmp_path)
    shutil.rmtree(root / "models")
    with pytest.raises(CatalogValidationError, match=r"missing directory 'models/'"):
        load_catalog(root=root)


def test_bad_file_name_is_refused(tmp_path):
    root = copy_catalog(tmp_path)
    (root / "gpus" / "a100-80gb.toml").rename(root / "gpus" / "A100 80GB.toml")
    with pytest.raises(CatalogValidationError, match=r"^gpus/A100 80GB.toml: file name must be lowercase"):
        load_catalog(root=root)


def test_user_catalog_may_add_entries(tmp_path):
    root = copy_catalog(tmp_path)
    shutil.copy(root / "gpus" / "h100-80gb.toml", root / "gpus" / "h100-capped.toml")
    cat = load_catalog(root=root)
    assert cat.gpu("h100-capped").dense_fp16_tflops == 989
    with pytest.raises(CatalogError, match=r"no machine in the catalog holds gpu 'h100-capped'"):
        cat.machine_for_gpu("h100-capped")


# --- derived model numbers, by hand ------------------------------------------------------


def test_kv_bytes_per_token_by_hand(cat):
    # 2 (K, V) x layers x kv_heads x head_dim x 2 bytes (fp16); FACTS.md (SW Section IV-C)
    assert cat.model("bloom-176b").kv_bytes_per_token == 2 * 70 * 112 * 128 * 2 == 4_014_080
    assert cat.model("llama2-70b").kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680


def test_llama2_70b_params_by_hand(cat):
    llm = cat.model("llama2-70b")
    attn = 8192 * 8192 + 2 * 8192 * (8 * 128) + 8192 * 8192  # Q, K+V (GQA), O
    ffn = 3 * 8192 * 28672  # SwiGLU gate, up, down
    assert llm.head_dim == 128
    assert (llm.attn_params_per_layer, llm.ffn_params_per_layer) == (attn, ffn) == (150_994_944, 704_643_072)
    assert llm.matmul_params == 80 * (attn + ffn) == 68_451_041_280
    assert llm.params == 68_451_041_280 + 2 * 32000 * 8192 == 68_975_329_280  # untied embeddings


def test_bloom_176b_params_by_hand(cat):
    llm = cat.model("bloom-176b")
    per_layer = 4 * 14336**2 + 2 * 14336 * 57344  # MHA Q, K, V, O + GeLU up, down
    assert llm.params == 70 * per_layer + 250880 * 14336 == 176_234_168_320  # tied embeddings
    assert llm.weight_bytes == 2 * 176_234_168_320


def test_every_model_is_within_5_percent_of_its_published_size(cat):
    for llm in cat.models.values():
        assert llm.params == pytest.approx(llm.published_params, rel=0.05), llm.name


# --- hardware numbers against published ratios ------------------------------------------


def test_h100_over_a100_tflops_is_near_splitwise_ratio(cat):
    # [SW] Table I prints 66.9 / 19.5 = 3.43x; the tensor-core peaks give 989 / 312 = 3.17x.
    ratio = cat.gpu("h100-80gb").dense_fp16_tflops / cat.gpu("a100-80gb").dense_fp16_tflops
    assert ratio == pytest.approx(3.43, rel=0.10)


def test_splitwise_table_v_cost_and_power_ratios(cat):
    a100, h100 = cat.machine("dgx-a100"), cat.machine("dgx-h100")
    assert h100.rated_power_w / a100.rated_power_w == pytest.approx(1.75)  # [SW] Table V
    assert 40 * h100.rated_power_w == pytest.approx(70 * a100.rated_power_w)  # iso-power: 40 H = 70 A
    assert h100.power_w(0.5) / a100.rated_power_w == pytest.approx(1.23, rel=0.01)  # Hcap 1.23x
    assert h100.cost_options_usd_per_h == pytest.approx({"sw-table-i": 38.0, "sw-table-v": 2.35 * 17.6})
    assert (a100.cost_usd_per_h, h100.cost_usd_per_h) == (17.6, 38.0)  # [SW] Table I


def test_thunderserve_prices(cat):
    # [TS]: in-house 8xA100 at $14.024/h = 8 x $1.753; cloud nodes priced per GPU (Table 1).
    assert 8 * cat.gpu("a100-80gb").price_usd_per_h == pytest.approx(14.024)
    for name in ("a40-8x", "a6000-4x", "a5000-4x", "rtx3090ti-4x"):
        m = cat.machine(name)
        assert m.cost_usd_per_h == pytest.approx(m.gpus_per_machine * cat.gpu(m.gpu).price_usd_per_h)
        assert m.inter_node_link == "ethernet"


def test_machine_for_gpu(cat):
    assert cat.machine_for_gpu("h100-80gb").name == "dgx-h100"
    assert cat.machine_for_gpu("a100-80gb").name == "dgx-a100"
    assert cat.machine_for_gpu("a6000").name == "a6000-4x"
    for gpu in cat.gpus:
        assert cat.machine_for_gpu(gpu).gpu == gpu
    with pytest.raises(UnknownNameError, match="did you mean 'h100-80gb'"):
        cat.machine_for_gpu("h100")


# --- machine power under GPU power caps ----------------------------------------------------


def test_power_cap_arithmetic(cat):
    m = cat.machine("dgx-h100")
    assert m.power_w(0.5) == pytest.approx(0.7 * m.rated_power_w)  # SW: GPUs at 50% -> machine at 70%
    assert m.power_w(1.0) == m.rated_power_w
    caps = np.array([[0.25, 0.5], [0.75, 1.0]])
    assert m.power_w(caps).shape == (2, 2)
    np.testing.assert_allclose(m.power_w(caps), m.rated_power_w * (1 - 0.6 * (1 - caps)))


@pytest.mark.parametrize("cap", [0, 1.5, -0.1, float("nan"), [0.5, 0.0, 2.0]])
def test_power_cap_outside_0_1_is_refused(cat, cap):
    with pytest.raises(ValueError, match=r"power_cap must be in \(0, 1\]") as info:
        cat.machine("dgx-h100").power_w(cap)
    assert "\n" not in str(info.value)


@given(st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=1, max_size=20))
def test_power_is_monotone_and_bounded_by_the_gpu_share(caps):
    m = load_catalog().machine("dgx-a100")
    power = m.power_w(np.sort(caps))
    assert np.all(np.diff(power) >= 0)
    assert np.all(power <= m.rated_power_w)
    assert np.all(power >= m.rated_power_w * (1 - m.gpu_power_fraction))
