"""Hand-checked instances and option errors of the Kazemnejad et al. 2023 battery."""

import random
from collections import Counter

import pytest

from pe_toolkit.tasks import get_task, interpret_pcfg, interpret_scan
from pe_toolkit.tasks.scan import scan_commands


def words(text):
    return text.split()


# -- copy / reverse ------------------------------------------------------------------------------


def test_copy_variants_by_hand():
    seq = words("s7 s1 s9")
    assert get_task("copy_random").make(seq).answer == seq
    assert get_task("copy_random").make(seq).prompt == words("Copy : s7 s1 s9")
    assert get_task("copy_random_x2").make(seq).answer == words("s7 s1 s9 [NEXT] s7 s1 s9")
    assert get_task("copy_repeat_x2").make(words("s3 s3")).answer == words("s3 s3 s3 s3")
    ex = get_task("copy_replace").make(words("s7 s7 s7"), target="s2")
    assert ex.prompt == words("Replace s7 with s2 in s7 s7 s7")
    assert ex.answer == words("s2 s2 s2")
    assert ex.length == 3


def test_copy_repeat_and_replace_keep_one_token():
    for ex in get_task("copy_repeat").generate(20, seed=0):
        assert len(set(ex.prompt[2:])) == 1 and ex.answer == ex.prompt[2:]
    for ex in get_task("copy_replace").generate(20, seed=0):
        assert ex.meta["source"] != ex.meta["target"] and ex.answer == [ex.meta["target"]] * ex.length


def test_reverse_variants_by_hand():
    seq = words("s7 s1 s9")
    assert get_task("reverse").make(seq).prompt == words("Reverse : s7 s1 s9")
    assert get_task("reverse").make(seq).answer == words("s9 s1 s7")
    assert get_task("reverse_x2").make(seq).answer == words("s9 s1 s7 [NEXT] s9 s1 s7")
    assert get_task("reverse_copy").make(seq).answer == words("s9 s1 s7 [NEXT] s7 s1 s9")


def test_copy_reverse_defaults_are_the_paper_split():
    for name in ("copy_random", "reverse_x2"):
        task = get_task(name)
        assert (task.train_lengths, task.test_lengths) == ((4, 20), (21, 40))
        assert len(task.alphabet) == 100


@pytest.mark.parametrize("name", ["copy_random", "reverse"])
def test_copy_reverse_option_errors(name):
    with pytest.raises(ValueError, match=f"{name}: num_symbols must be >= 2, got 1"):
        get_task(name, num_symbols=1)
    with pytest.raises(TypeError, match=f"{name}: num_symbols must be an int"):
        get_task(name, num_symbols="10")
    with pytest.raises(ValueError, match=f"{name}: seq must not be empty"):
        get_task(name).make([])


def test_copy_make_errors():
    with pytest.raises(ValueError, match="copy_replace: needs a constant seq and a target token"):
        get_task("copy_replace").make(["s1", "s2"], target="s3")
    with pytest.raises(ValueError, match="copy_random: target is only for copy_replace"):
        get_task("copy_random").make(["s1"], target="s3")


def test_bad_variant_names():
    from pe_toolkit.tasks import CopyTask, ReverseTask

    with pytest.raises(ValueError, match=r"copy: variant must be one of \('repeat', 'replace'"):
        CopyTask(variant="twice")
    with pytest.raises(ValueError, match=r"reverse: variant must be one of \('plain', 'x2', 'copy'\)"):
        ReverseTask(variant="rev")


# -- arithmetic ----------------------------------------------------------------------------------


def test_addition_by_hand():
    task = get_task("addition")
    ex = task.make(57, 68)
    assert ex.prompt == words("Compute 5 7 + 6 8 ?")
    assert ex.answer == words("The answer is 1 2 5 .")
    assert ex.length == 2
    assert task.make(999, 1).answer == words("The answer is 1 0 0 0 .")
    assert task.make(53726, 1917).prompt == words("Compute 5 3 7 2 6 + 1 9 1 7 ?")
    assert task.make(53726, 1917).answer == words("The answer is 5 5 6 4 3 .")
    assert task.make(53726, 1917).length == 5
    assert task.check(ex, words("The answer is 1 2 5 ."))
    assert not task.check(ex, words("The answer is 1 1 5 ."))


def test_addition_carry_chain_scratchpad():
    steps = get_task("addition", scratchpad="icovr").make(999, 1).meta["steps"]
    assert [s.input for s in steps] == ["9 , 1", "9 , 0", "9 , 0", "0 , 0"]
    assert [s.output for s in steps] == ["0", "0", "0", "1"]
    assert [s.remaining for s in steps] == ["9 9 + 0", "9 + 0", "+", "+"]


def test_addition_operand_digits():
    task = get_task("addition")
    for split, (low, high) in (("train", (4, 8)), ("test", (9, 16))):
        for ex in task.generate(50, split=split, seed=0):
            da, db = len(str(ex.meta["a"])), len(str(ex.meta["b"]))
            assert max(da, db) == ex.length and low <= ex.length <= high
            assert min(da, db) >= 4
            assert ex.meta["result"] == ex.meta["a"] + ex.meta["b"]


def test_polynomial_by_hand():
    task = get_task("polynomial")
    ex = task.make([3, -1], [2, 0], 2)
    assert ex.prompt == words("Evaluate at x = 2 in 3 * x ** 2 + - 1 * x ** 0 ?")
    assert ex.answer == words("The answer is 1 .")                  # 3*4 - 1 = 11
    assert task.make([-3], [3], -2).answer == words("The answer is 4 .")          # -3 * -8 = 24
    assert task.make([-2, -1], [2, 0], 1).answer == words("The answer is 7 .")    # -3 mod 10 = 7
    for ex in task.generate(30, split="test", seed=0):
        m = ex.meta
        value = sum(c * m["x"] ** d for c, d in zip(m["coeffs"], m["degrees"])) % 10
        assert ex.answer == words(f"The answer is {value} .")
        assert all(-3 <= c <= 3 for c in m["coeffs"]) and all(0 <= d <= 3 for d in m["degrees"])
        assert -2 <= m["x"] <= 2


def test_summation_and_parity_by_hand():
    ex = get_task("summation").make([3, 3, 1, 8])
    assert ex.prompt == words("Compute : 3 + 3 + 1 + 8 .")
    assert ex.answer == words("The answer is 5 .")
    assert get_task("summation").make([9, 9, 9]).answer == words("The answer is 7 .")
    ex = get_task("parity").make([0, 1, 1])
    assert ex.prompt == words("Is the number of 1 's even in the sequence [ 0 , 1 , 1 ] ?")
    assert ex.answer == words("The answer is Yes .")
    assert get_task("parity").make([1, 0, 0]).answer == words("The answer is No .")
    assert get_task("parity").train_lengths == (3, 8)


def test_arithmetic_option_errors():
    with pytest.raises(ValueError, match="polynomial: modulus must be >= 2, got 1"):
        get_task("polynomial", modulus=1)
    with pytest.raises(TypeError, match="summation: modulus must be an int"):
        get_task("summation", modulus=10.0)
    with pytest.raises(ValueError, match="addition: min_digits must be >= 1, got 0"):
        get_task("addition", min_digits=0)
    with pytest.raises(ValueError, match="addition: a must be >= 0, got -5"):
        get_task("addition").make(-5, 3)
    with pytest.raises(ValueError, match="parity: bits must be a non-empty list of 0/1"):
        get_task("parity").make([0, 2])
    with pytest.raises(ValueError, match="polynomial: coeffs and degrees must be non-empty and of equal"):
        get_task("polynomial").make([1, 2], [0], 1)
    with pytest.raises(ValueError, match="summation: values must not be empty"):
        get_task("summation").make([])


# -- sort ----------------------------------------------------------------------------------------


def test_sort_by_hand():
    ex = get_task("sort_single").make(list("MEFFO"))
    assert ex.prompt == words("Sort the following list [ M , E , F , F , O ] .")
    assert ex.answer == words("The sorted list is [ E , F , F , M , O ] .")
    assert get_task("sort_single").make(list("aZA")).answer == words("The sorted list is [ A , Z , a ] .")
    ex = get_task("sort_multi").make([2468, 881, 4125])
    assert ex.prompt == words("Sort the following list [ 2 4 6 8 , 8 8 1 , 4 1 2 5 ] .")
    assert ex.answer == words("The sorted list is [ 8 8 1 , 2 4 6 8 , 4 1 2 5 ] .")
    assert ex.length == 3


def test_sort_generated_values():
    assert len(get_task("sort_single").alphabet) == 50
    for ex in get_task("sort_multi").generate(20, split="test", seed=0):
        assert all(10 <= v <= 9999 for v in ex.meta["items"])
        assert ex.meta["result"] == sorted(ex.meta["items"])


def test_sort_option_errors():
    with pytest.raises(ValueError, match="sort_single: alphabet_size must be <= 50, got 51"):
        get_task("sort_single", alphabet_size=51)
    with pytest.raises(ValueError, match=r"sort_multi: value_range must have min <= max, got \(9, 1\)"):
        get_task("sort_multi", value_range=(9, 1))
    with pytest.raises(ValueError, match="sort_multi: items must not be empty"):
        get_task("sort_multi").make([])


# -- LEGO ----------------------------------------------------------------------------------------


def test_lego_chain_by_hand():
    ex = get_task("lego").make(["a", "b", "c", "d"], [-1, 1, 1, -1], "d")
    assert ex.prompt == words("If a = -1 , b = - a , c = + b , d = - c . Then , what is the value of d ?")
    assert ex.answer == words("The answer is -1 .")


def test_lego_permuted_reference_example():
    """The reference processor's example: clauses c = + t, r = + f, t = - q, q = -1, f = - c; query c."""
    task = get_task("lego_permuted", scratchpad="i_o_r")
    ex = task.make(list("qtcfr"), [-1, 1, 1, -1, -1], "c", order=[2, 4, 1, 0, 3])
    assert " ".join(ex.prompt) == (
        "If c = + t , r = + f , t = - q , q = -1 , f = - c . Then , what is the value of c ?")
    assert ex.meta["final_answer"] == words("The answer is +1 .")
    steps = task.parse_scratchpad(ex.answer)
    assert [(s.input, s.output, s.remaining) for s in steps] == [
        ("q", "-1", "c = + t , r = + f , t = - q , f = - c"),
        ("t", "+1", "c = + t , r = + f , f = - c"),
        ("c", "+1", "r = + f , f = - c"),
    ]


def test_lego_queries_the_second_half_and_resolves_correctly():
    for name in ("lego", "lego_permuted"):
        for ex in get_task(name).generate(40, split="test", seed=2):
            chain, values = ex.meta["chain"], ex.meta["values"]
            assert chain.index(ex.meta["query"]) >= (len(chain) + 1) // 2
            # Re-resolve the chain from the shown clauses.
            clauses = dict(c.split(" = ") for c in ex.meta["clauses"])
            resolved = {}
            while len(resolved) < len(chain):
                for var, rhs in clauses.items():
                    if rhs in ("+1", "-1"):
                        resolved[var] = int(rhs)
                    elif rhs.split()[1] in resolved:
                        resolved[var] = resolved[rhs.split()[1]] * (1 if rhs[0] == "+" else -1)
            assert resolved == dict(zip(chain, values))
            assert ex.meta["result"] == resolved[ex.meta["query"]]
    orders = Counter(ex.meta["clauses"][0].split()[2] in ("+1", "-1")
                     for ex in get_task("lego_permuted").generate(60, seed=0))
    assert orders[False] > 0          # the head clause is not always first once permuted


def test_lego_option_errors():
    with pytest.raises(ValueError, match="lego: test_lengths must have max <= 26, got"):
        get_task("lego", test_lengths=(9, 27))
    with pytest.raises(TypeError, match="lego: permuted must be a bool"):
        from pe_toolkit.tasks import LegoTask

        LegoTask(permuted="yes")
    with pytest.raises(ValueError, match="lego: query must be one of"):
        get_task("lego").make(["a", "b"], [1, 1], "z")
    with pytest.raises(ValueError, match=r"lego: order must be a permutation of range\(2\)"):
        get_task("lego").make(["a", "b"], [1, 1], "b", order=[0, 0])


# -- SCAN ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "actions"),
    [
        ("jump", "JUMP"),
        ("turn left", "LTURN"),
        ("walk right", "RTURN WALK"),
        ("jump around left", "LTURN JUMP LTURN JUMP LTURN JUMP LTURN JUMP"),
        ("turn opposite left", "LTURN LTURN"),
        ("turn around right", "RTURN RTURN RTURN RTURN"),
        ("look opposite right twice", "RTURN RTURN LOOK RTURN RTURN LOOK"),
        ("walk after run", "RUN WALK"),
        ("walk and run", "WALK RUN"),
        ("look right twice and jump opposite right", "RTURN LOOK RTURN LOOK RTURN RTURN JUMP"),
        ("run opposite left thrice after walk", "WALK LTURN LTURN RUN LTURN LTURN RUN LTURN LTURN RUN"),
        ("jump around left after walk twice", "WALK WALK LTURN JUMP LTURN JUMP LTURN JUMP LTURN JUMP"),
    ],
)
def test_scan_interpretation_by_hand(command, actions):
    assert interpret_scan(command) == words(actions)
    ex = get_task("scan_length").make(command)
    assert ex.prompt == ["Solve", ":", *words(command)]
    assert ex.answer == words(actions) and ex.length == len(words(actions))


def test_scan_grammar_size_and_length_split():
    commands = scan_commands()
    assert len(commands) == len(set(commands)) == 20910
    counts = Counter(len(interpret_scan(c)) for c in commands)
    assert max(counts) == 48 and 47 not in counts
    assert interpret_scan("jump around left thrice and walk around right thrice") == (
        words("LTURN JUMP") * 12 + words("RTURN WALK") * 12)
    task = get_task("scan_length")
    assert task.lengths("train") == [n for n in sorted(counts) if n <= 25]
    assert task.lengths("test") == [n for n in sorted(counts) if 26 <= n <= 48]
    # Lake & Baroni's original length split (<= 22 vs >= 24 actions) has 16,990 / 3,920 commands;
    # Kazemnejad et al. re-split at 25.
    assert sum(v for n, v in counts.items() if n <= 22) == 16990 and 23 not in counts
    assert sum(v for n, v in counts.items() if n >= 24) == 3920
    assert sum(counts[n] for n in task.lengths("train")) == 17774
    assert sum(counts[n] for n in task.lengths("test")) == 3136


def test_scan_natural_distribution_option():
    counts = Counter(len(interpret_scan(c)) for c in scan_commands())
    natural = get_task("scan_length", balance_lengths=False)
    support = natural.lengths("test")
    assert natural._length_weights(support) == [counts[n] for n in support]
    # 36 actions: 64 of the 3,136 test commands (2 %), but 1 of 13 reachable test lengths (7.7 %).
    share = {
        balanced: Counter(ex.length for ex in get_task("scan_length", balance_lengths=balanced).generate(
            2000, split="test", seed=0))[36] / 2000
        for balanced in (True, False)
    }
    assert share[False] < 0.04 < 0.06 < share[True]


def test_scan_errors():
    with pytest.raises(ValueError, match="not a SCAN verb phrase: 'turn'"):
        interpret_scan("turn twice")
    with pytest.raises(ValueError, match="not a SCAN verb phrase"):
        interpret_scan("walk and run after jump")
    with pytest.raises(ValueError, match="scan_length: no SCAN command has 47 actions"):
        get_task("scan_length").sample(random.Random(0), 47)
    with pytest.raises(ValueError, match=r"scan_length: test_lengths \(47, 47\) contains no reachable"):
        get_task("scan_length", test_lengths=(47, 47))
    with pytest.raises(ValueError, match="scan_length: test_lengths must have max <= 48"):
        get_task("scan_length", test_lengths=(26, 49))
    with pytest.raises(TypeError, match="scan_length: balance_lengths must be a bool"):
        get_task("scan_length", balance_lengths=1)


# -- PCFG SET ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "output", "functions"),
    [
        ("append swap_first_last A1 B2 C3 , repeat D4", "C3 B2 A1 D4 D4", 3),
        ("remove_first shift A1 B2 C3 , echo D4 E5", "D4 E5 E5", 3),
        ("prepend A1 , B2 C3", "B2 C3 A1", 1),
        ("remove_second reverse A1 B2 , C3", "B2 A1", 2),
        ("shift A1 B2 C3", "B2 C3 A1", 1),
        ("echo remove_first A1 , append B2 , C3 D4", "B2 C3 D4 D4", 3),
        ("copy swap_first_last A1", "A1", 2),
        # Lines 1, 2, 4, 18 of am-i-compositional data/pcfgset/productivity/test.{src,tgt} (9 functions each).
        ("append X6 Z11 T16 H9 , reverse remove_second Q13 Y2 C11 , repeat repeat prepend append L8 P13 X1 , "
         "D8 U1 V18 , remove_second V10 J5 I8 , copy I10 K18 J18 C4", "X6 Z11 T16 H9 C11 Y2 Q13", 9),
        ("remove_first shift remove_second S13 E4 M11 A7 , swap_first_last remove_second L13 M18 , M7 X4 , "
         "remove_second remove_first remove_second E10 E3 U4 H7 Z2 , remove_second N7 G11 D1 I19 , M9 D7 , "
         "U15 F2 , F8 J19 B19 D9 M16", "U15 F2", 9),
        ("swap_first_last remove_first shift append shift Y4 E8 P7 , repeat Q20 T14 X11 , "
         "echo append X5 U14 , remove_second D19 U1 T1 L14 Y15 , U12 O4 F12",
         "Y15 U14 D19 U1 T1 L14 Y15 X5", 9),
        ("copy copy append reverse swap_first_last reverse A15 P12 , reverse copy repeat H13 Z16",
         "P12 A15 Z16 H13 Z16 H13", 9),
    ],
)
def test_pcfg_interpretation_by_hand(expression, output, functions):
    assert interpret_pcfg(expression) == words(output)
    ex = get_task("pcfg_productivity").make(expression)
    assert ex.prompt == words(expression) and ex.answer == words(output) and ex.length == functions


def test_pcfg_generated_examples_parse_and_respect_the_cap():
    task = get_task("pcfg_productivity", max_output_length=30)
    assert len(task.alphabet) == 520
    for ex in task.generate(50, split="test", seed=0):
        assert interpret_pcfg(ex.prompt) == ex.answer and len(ex.answer) <= 30


def test_pcfg_errors():
    with pytest.raises(ValueError, match="append needs ', ' between its arguments"):
        interpret_pcfg("append A1 B2")
    with pytest.raises(ValueError, match="trailing tokens"):
        interpret_pcfg("copy A1 , B2")
    with pytest.raises(ValueError, match="ends early"):
        interpret_pcfg("reverse")
    with pytest.raises(ValueError, match=r"pcfg_productivity: string_lengths must have min >= 1, got \(0, "):
        get_task("pcfg_productivity", string_lengths=(0, 3))
    with pytest.raises(ValueError, match="pcfg_productivity: max_output_length must be >= 5, got 4"):
        get_task("pcfg_productivity", max_output_length=4)
    with pytest.raises(ValueError, match="pcfg_productivity: num_letters must be <= 26, got 27"):
        get_task("pcfg_productivity", num_letters=27)
