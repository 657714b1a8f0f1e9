from shop.coupons import ACTIVE


def test_codes_are_upper_case_and_unique():
    assert all(code == code.upper() for code in ACTIVE)
    assert len(set(ACTIVE)) == len(ACTIVE)
