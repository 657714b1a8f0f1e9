from calc.ops import clamp


def test_clamp_0():
    assert clamp(-40, -20, 20) == -20


def test_clamp_1():
    assert clamp(-37, -20, 20) == -20


def test_clamp_2():
    assert clamp(-34, -20, 20) == -20


def test_clamp_3():
    assert clamp(-31, -20, 20) == -20


def test_clamp_4():
    assert clamp(-28, -20, 20) == -20


def test_clamp_5():
    assert clamp(-25, -20, 20) == -20


def test_clamp_6():
    assert clamp(-22, -20, 20) == -20


def test_clamp_7():
    assert clamp(-19, -20, 20) == -19


def test_clamp_8():
    assert clamp(-16, -20, 20) == -16


def test_clamp_9():
    assert clamp(-13, -20, 20) == -13


def test_clamp_10():
    assert clamp(-10, -20, 20) == -10


def test_clamp_11():
    assert clamp(-7, -20, 20) == -7


def test_clamp_12():
    assert clamp(-4, -20, 20) == -4


def test_clamp_13():
    assert clamp(-1, -20, 20) == -1


def test_clamp_14():
    assert clamp(2, -20, 20) == 2


def test_clamp_15():
    assert clamp(5, -20, 20) == 5


def test_clamp_16():
    assert clamp(8, -20, 20) == 8


def test_clamp_17():
    assert clamp(11, -20, 20) == 11


def test_clamp_18():
    assert clamp(14, -20, 20) == 14


def test_clamp_19():
    assert clamp(17, -20, 20) == 17


def test_clamp_20():
    assert clamp(20, -20, 20) == 20


def test_clamp_21():
    assert clamp(23, -20, 20) == 20


def test_clamp_22():
    assert clamp(26, -20, 20) == 20


def test_clamp_23():
    assert clamp(29, -20, 20) == 20


def test_clamp_24():
    assert clamp(32, -20, 20) == 20


def test_clamp_25():
    assert clamp(35, -20, 20) == 20


def test_clamp_26():
    assert clamp(38, -20, 20) == 20


def test_clamp_27():
    assert clamp(41, -20, 20) == 20


def test_clamp_28():
    assert clamp(44, -20, 20) == 20


def test_clamp_29():
    assert clamp(47, -20, 20) == 20
