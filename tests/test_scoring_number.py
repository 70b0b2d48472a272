"""The number grader on good, bad and adversarial real-looking outputs."""

from __future__ import annotations

import time

import pytest
from conftest import LINEAR_CPU_S, graded, number_task

from fugu_lite.tasks import Task

COT = (
    "Let's think step by step. Tom starts with 12 apples. He buys 3 bags of 4 apples, "
    "so 3 * 4 = 12 more apples. 12 + 12 = 24. He gives 5 to Ann: 24 - 5 = 19."
)


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("19", COT),
        ("19", COT + "\nThe answer is 19."),
        ("19", COT + " So the answer is 19 apples (he had 12 at first)."),
        ("19", "Final answer: 19"),
        ("19", r"Adding up we get \boxed{19}. Checking: 19 - 7 = 12."),
        ("19", r"First try: \boxed{18}. Recounting, the answer is \boxed{19}."),  # the last box
        ("12", "The answer will be 12.\n\nThere are 3 boxes with 4 eggs each."),
        ("12", "The total is 12.\n\nThat is 3 boxes of 4 eggs."),
        ("1234", "The total is $1,234."),
        ("1234.5", "It costs \\boxed{\\$1{,}234.50}"),
        ("10000", r"\boxed{10,\!000}"),  # LaTeX spacing between thousands (the MATH data set)
        ("1000000", r"The answer is $\$1,\!000,\!000$."),
        ("1234567", r"\boxed{1\,234\,567}"),
        ("1000", r"\boxed{1\ 000}"),  # read 000, 0, before
        ("1000", r"The answer is $1\ 000$."),
        ("1500", "Natalia sold 48 clips in April... #### 1,500"),
        ("18", "#### 18\nShe sells 9 eggs at $2 each."),  # the first number after ####
        ("12", "#### 12\nNote: 1/0 is undefined."),  # no division by zero before it
        ("12", "#### 12 (1/0 is undefined)"),  # joined to it by no '=' nor operation
        ("12", "The answer is 12 (1/0 is undefined)."),
        ("120", "#### 120 = 2 hours"),  # an '=' after no operation ends no chain
        ("12", "#### 12 = 12"),
        ("5", "#### 5 = 5 apples"),
        ("18", "She makes 17.\n#### 17\nWait, I forgot one egg: 18.\n#### 18"),  # the last ####
        ("-7", "The temperature dropped to −7 degrees."),
        ("-7", "x = -7"),
        ("-7", "The answer is negative 7."),
        ("25", "25% of the students"),
        ("0.75", r"The probability is \boxed{\frac{3}{4}}"),
        ("0.75", "The answer is 3/4."),
        ("3/4", "That is 0.75 of the cake."),
        ("0.3333", "The answer is 1/3"),
        ("1/3", "about 0.33"),
        ("2.5", "The answer is 2.50."),
        ("12", "**12**"),
        ("8", "The answer is 5 + 3 = 8. Then we double check 8 + 1 = 9 is wrong."),
        ("42", "The answer is 42. This is because 6 * 7 = 42, not 41."),
        ("300", "300 km"),
        ("5", "The answer is: 5"),
        ("1", "The letter 'i' appears only once in the word 'rabbit'."),
        ("3", "She visited the museum thrice."),
        ("2", "Two."),
        ("0.5", "The answer is $\\frac{1}{2}$."),  # LaTeX outside a \boxed{}
        ("0.5", "$\\dfrac{1}{2}$"),
        ("-0.5", r"\boxed{\frac{-1}{2}}"),  # the sign in the numerator
        ("0.75", r"\boxed{\frac34}"),
        ("1.5", r"\boxed{1\frac{1}{2}}"),  # a mixed number, not 11/2
        # "/" is a fraction bar: "#### 20 / 4" is the number 5, as \frac{20}{4} is (while
        # "#### 20 ÷ 4" is a division not done, no answer)
        ("5", "#### 20 / 4"),
        ("5", r"#### \frac{20}{4}"),
        ("0.75", "#### 3 / 4"),
    ],
)
def test_number_grader_reads_the_final_number(answer: str, output: str) -> None:
    result = graded(number_task(answer), output)
    assert result.score == 1.0, result.detail
    assert result.error is None


@pytest.mark.parametrize(
    ("answer", "output", "why"),
    [
        ("19", COT + " Oh wait, he also eats 2, so 17.", "'17'"),
        ("19", "The answer is 20.", "'20'"),
        ("19", "I am not sure how to solve this.", "no number"),
        ("19", "", "no number"),
        ("19", "The answer is 1/0.", "no number"),  # not a grading error (ZeroDivisionError)
        ("19", "x = 0^-1", "no number"),
        ("19", r"\boxed{18} (even though 19 came up before)", "'18'"),
        ("1/3", "about 0.3", "'0.3'"),
        ("7", "-7", "'-7'"),
        ("1000", "10.00", "'10.00'"),
        ("12", "The answer is twelve, not 11.", "'11'"),
        ("0", r"\boxed{10,\!000}", "'10,000'"),
        ("7", "The answer is negative 7.", "'negative 7'"),
        ("-5", "The count must be non-negative 5", "'5'"),
        # near the reference is not equal to it: 1e-6 relative, 1e-9 absolute beside a zero
        ("1000", "The total is $1,001.", "'$1,001'"),
        ("0.00001", "The probability is 0.00002.", "'0.00002'"),
        ("5.29e-11", "The Bohr radius is about 5.29e-10 m.", "'5.29e-10'"),  # ten times off
        ("6.626e-34", "h = 6.626 × 10^-30 J·s", "'6.626 × 10^-30'"),
        ("0", "The answer is 0.00002.", "'0.00002'"),
    ],
)
def test_number_grader_wrong_answers_score_zero_with_reason(
    answer: str, output: str, why: str
) -> None:
    result = graded(number_task(answer), output)
    assert result.score == 0.0
    assert result.error is None
    assert why in result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("1000000", "1e6"),
        ("1000000", "The answer is 1.0E+06."),
        ("0.001", "1e-3"),
        ("1500000", "About 1.5 × 10^6 people."),
        ("1500000", "1.5×10⁶"),  # superscripts, which NFKC would turn into 1.5×106
        ("1500000", r"\boxed{1.5 \times 10^{6}}"),
        ("1500000", r"$1.5 \cdot 10^{6}$"),
        ("1500000", r"\boxed{1.5 \cdot 10^{6}}"),  # in a box (\cdot blanked read 10^6)
        ("1000000", "10^6"),
        ("0.001", "10⁻³"),
        ("1024", "The answer is 2^10."),
        ("1024", "2**10"),
        ("25", "5²"),
        ("3", "x^2 = 9, so x = 3"),
        ("9.109e-31", "The mass is 9.109 × 10^-31 kg."),
        ("5.551115123125783e-17", "The answer is 0."),  # a key computed as 0.1 + 0.2 - 0.3
        ("0", "The answer is 1e-10."),
    ],
)
def test_number_grader_reads_scientific_notation_and_powers(answer: str, output: str) -> None:
    result = graded(number_task(answer), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        # a key in scientific notation shows the decimals of its mantissa and exponent
        ("1.6e-19", "0.00", 0.0),  # no digit of it: 0.00 is no rounding of 1.6e-19
        ("1.6e-19", "The answer is 0.", 0.0),  # a small key written as such is no float noise
        ("1.6e-19", "1.6e-19", 1.0),
        ("1.6e-19", "1.60 × 10^-19", 1.0),
        ("1.6e-19", r"The charge is $1.6 \times 10^{-19}$ C.", 1.0),
        ("5e-3", "0.01", 0.0),  # as for a key 0.005: one digit is no rounding
        ("0.00001", "0.00", 0.0),
        ("-2.220446049250313e-16", "0.00", 1.0),  # a computed key's float noise
        ("1.2345678901234e-12", "0.00", 0.0),  # 14 significant digits: a key, not noise
    ],
)
def test_a_small_key_is_matched_at_the_precision_it_is_written_to(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("25", r"The area is \boxed{25 \text{ cm}^2}.", 1.0),
        ("25", "The area is 25 cm^2.", 1.0),
        ("12", r"So the area is $12\,\text{m}^2$.", 1.0),
        ("2", r"\boxed{25 \text{ cm}^2}", 0.0),  # the unit's exponent is no answer
        ("1024", r"\boxed{2^{10}}", 1.0),
    ],
)
def test_the_exponent_of_a_unit_is_not_a_number(answer: str, output: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "why"),
    [
        ("1", "1e6", "'1e6'"),  # the mantissa alone is not the number
        ("6", "1 × 10^6", "'1 × 10^6'"),
        ("106", "10⁶", "'10^6'"),
        ("1", "1e999999", "'1e999999'"),  # too large for a float: a wrong answer, no error
        ("2", "2^1000000", "'2^1000000'"),
        ("10", "The answer is 2^10.", "'2^10'"),
    ],
)
def test_a_power_is_its_value_not_its_base_or_exponent(answer: str, output: str, why: str) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (0.0, None)
    assert why in result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("0.5", "50%", 1.0),  # a probability or share written as a percentage
        ("0.25", "The probability is 25 percent.", 1.0),
        ("1/3", "About 33.3%.", 1.0),
        ("0.3333", "About 33% of them.", 1.0),  # 0.33: the share has 2 decimals more
        ("50", "50%", 1.0),  # "what percent ...?" with the reference written without %
        ("50%", "50", 1.0),
        ("50%", "The answer is 50 %.", 1.0),
        ("0.5%", "0.5%", 1.0),
        ("0.5%", "50%", 0.0),  # a reference written with % is a percentage: 50% is not 0.5%
        ("50%", "0.5", 0.0),  # ambiguous: 0.5 could be 0.5 percent
        ("0.5", "5%", 0.0),
        ("5", "0.05", 0.0),  # only a number written with % is read both ways
        # LaTeX's percent sign (read as 25 alone before)
        ("0.25", r"The probability is $25\%$.", 1.0),
        ("0.5", r"\boxed{50\,\%}", 1.0),
        ("25", r"The answer is $25\%$.", 1.0),
        ("0.25", r"The answer is $25\%$.", 1.0),
        ("0.12", "The rate is 12 per cent.", 1.0),
        # the decimals of a reference written with % are its own: "33.33%" is 33.33 at 2
        ("33.33%", "The answer is 33.333%.", 1.0),
    ],
)
def test_number_grader_reads_a_percentage_as_its_share_too(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("1000000", "1 million", 1.0),
        ("2500000000", "The company earned $2.5 billion.", 1.0),
        ("1500", "1.5k", 1.0),
        ("1500", "It earned 1.5K dollars.", 1.0),
        ("300", "The temperature is 300K.", 1.0),  # Kelvin: read as written too
        ("1000000", "The answer is a million.", 1.0),
        ("1000000", "One million", 1.0),
        ("1000000", "It grew from 800 thousand to a million.", 1.0),
        ("2000000", "two million people", 1.0),
        ("100", "a hundred percent", 1.0),
        # part of a longer number in words: not read as its first part
        ("100", "one hundred and twenty", 0.0),
        ("1000000", "half a million", 0.0),
        ("1000", "one thousand two hundred", 0.0),
        ("1000000", "The odds are one in a million", 0.0),
        ("3000", "The answer is 3 thousand.", 1.0),
        ("1500000", "The answer is 1.5 Million people.", 1.0),
        ("3000000", "It sold for $3M.", 1.0),
        ("2500", r"\boxed{\$2.5k}", 1.0),
        ("2500000000", "The deal was worth $2.5B.", 1.0),
        ("2000000000000", "The debt is 2 trillion dollars.", 1.0),
        ("4000000", "Revenue was $4mn.", 1.0),
        ("25", "The answer is twenty-five hundred.", 0.0),  # not its first part
        ("2.5", "Revenue was 2.5 million dollars.", 1.0),  # a reference counted in millions
        ("1250000", "About 1.3 million.", 0.0),  # no credit for rounding a large number
        # units and other letters are no magnitude
        ("1000", "1 kg", 0.0),
        ("5000", "5 km", 0.0),
        ("1000", "1kB", 0.0),
        ("2000000", "2M", 0.0),  # 2 molar, 2 metres: only "$2M" is money
        ("3000", "n = 3k+1", 0.0),
        ("3000000", "the 3 millionth visitor", 0.0),
        ("12000", "12k_1", 0.0),
    ],
)
def test_number_grader_reads_magnitude_words_and_suffixes(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("1234", "1\u202f234"),  # narrow no-break space between thousands (fr, SI)
        ("1234", "The answer is 1\u00a0234."),
        ("1234567", "1\u2009234\u2009567"),
        ("1234.5", "1\u202f234,5"),  # such spaces go with a decimal comma
        ("1234.5", "1.234,5"),
        ("1234567", "The population is 1.234.567."),
        ("1234567.89", "1.234.567,89"),
        ("0.5", "½"),
        ("1.5", "1½ cups"),
        ("1.5", "1 ½"),
        # plain spaces between thousands
        ("2500", "2 500 grams"),
        ("2500", "The answer is 2 500 g."),
        ("12345", "$12 345"),
        ("3000", "3 000 grams"),
        ("3000", "The answer is 3 000 grams."),
        ("1050000", "1 050 000"),
        ("1234567", "About 1 234 567 people."),
        # Indian grouping and apostrophes between thousands
        ("150000", "The total is ₹1,50,000."),
        ("1234567", "The answer is 12,34,567."),
        ("10000000", "Rs. 1,00,00,000"),
        ("1234567.5", "12,34,567.50"),
        ("1234567", "The answer is 1'234'567."),
        ("1234567", "The answer is 1’234’567."),
        ("1234.5", "CHF 1'234.50"),
        ("1234.56", "Answer: 1 234,56"),  # plain spaces and a decimal comma (French)
        ("2500.5", "2 500,5 grams"),
    ],
)
def test_number_grader_reads_unambiguous_locale_formats(answer: str, output: str) -> None:
    result = graded(number_task(answer), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("42", "答案是42。", 1.0),  # "the answer is 42": no number at all before
        ("42", "答案为42。因为每组7个，共6组。", 1.0),  # 为: a reason after the answer
        ("42", "所以答案是４２。", 1.0),  # full-width digits
        ("7", "小明有42个苹果，分给6个人，每人7个。", 1.0),
        ("42", "答案是42。验证：42÷6=7", 1.0),  # a check after the answer
        ("42", "最终答案：42", 1.0),
        ("-5", "答案是-5", 1.0),
        ("5", "答案是-5", 0.0),  # read 5 before
        ("30000", "答案是3万", 1.0),  # 万 is ten thousand
        ("3", "答案是3万", 0.0),
        ("120000000", "约1.2亿人", 1.0),
        ("120000000", "約1.2億人", 1.0),  # traditional characters
        ("35000", "共3萬5千人", 1.0),
        # smaller parts after 万 or 亿 are added (read 30000 after the marker, 5 at the end)
        ("35000", "答案是3万5千。", 1.0),
        ("30000", "答案是3万5千。", 0.0),
        ("35000", "总共有3万5千人", 1.0),
        ("5000", "总共有3万5千人", 0.0),
        ("120000000", "约1亿2000万人", 1.0),
        ("35500", "答案是3万5千5百。", 1.0),
        # a last digit alone counts in the unit below: "3万5" is 35000 (30005 is "3万零5"),
        # the same after the marker (read 30000) and at the end (read 5)
        ("35000", "答案是3万5。", 1.0),
        ("30000", "答案是3万5。", 0.0),
        ("35000", "总共有3万5", 1.0),
        ("5", "总共有3万5", 0.0),
        ("3500", "答案是3千5。", 1.0),
        ("35500", "答案是3万5千5。", 1.0),
        ("20000", "答案是1.5万5。", 0.0),  # not after a decimal: no guess
        ("20000", "答案是1.5万5千。", 0.0),  # nor a part after a decimal
        ("40000", "答案是3万1万。", 0.0),  # nor one not below the unit before it
        ("30000", "答案是 3 万", 1.0),  # a space between the number and its unit
        # digits after the last unit are the rest below it: "3万2000" is 32000 (read 2000 at
        # the end, 30000 after the marker), "3万12" 30012
        ("32000", "答案是3万2000元。", 1.0),
        ("35000", "总共有3万5000人", 1.0),
        ("5000", "总共有3万5000人", 0.0),
        ("30012", "答案是3万12", 1.0),
        ("3500", "共3千500人", 1.0),
        ("35200", "答案是3万5千200。", 1.0),
        # longer than the rest below 万: a number of its own, after 30000 (not 3)
        ("42345", "答案是3万12345", 0.0),
        ("30000", "答案是3万12345", 1.0),
        ("12345", "共3万12345", 1.0),  # the last number
        # 十 before a last digit is the tens, as in "3百2十5" (325): "3十5" is 35 (read 3
        # after the marker, 5 at the end); with no digit after it, 十 is no unit ("3十分")
        ("35", "答案是3十5。", 1.0),
        ("35", "共3十5人", 1.0),
        ("30", "答案是3十分简单", 0.0),
        ("15", "答案是1.5十5。", 0.0),  # not after a decimal: no guess
        ("30", "答案是3十55。", 0.0),  # nor before two digits
        # tens before a big unit are a number of that unit: "3十5万" is 35万 (read 50000)
        ("350000", "答案是3十5万。", 1.0),
        ("350000", "共3十5万人", 1.0),
        ("3500000000", "约3十5亿人", 1.0),
        # hundreds and thousands before it too: "1百3十5万" is 135万 (read 5 before)
        ("1350000", "共1百3十5万人", 1.0),
        ("5", "共1百3十5万人", 0.0),
        ("35000000", "答案是3千5百万。", 1.0),
        ("100350000", "约1亿3十5万人", 1.0),  # after a larger unit, a part of it
        # a last digit counts in the unit below the one before it, as "3千5" is 3500
        ("35000000", "共3千5万人", 1.0),
        ("13500", "共1.3十5万人", 0.0),  # nor after a decimal
        ("350000", "共3十5 万人", 1.0),  # a space before the unit
        ("350000", "共3 十 5 万人", 1.0),  # or around 十 (read 35)
        ("3500000", "共3 百 5 十 万人", 1.0),
        ("35000000", "共3 千 5 百 万人", 1.0),
        # a decimal after a unit is no last digit: read as written, as "1.5万5" is (read
        # 35000.5, a value nobody wrote)
        ("35000.5", "答案是3万5.5", 0.0),
        ("35000.5", "共3万5.5", 0.0),
        # more decimals than the unit's zeros: a decimal number of ones (read 1.23456, 1e-05)
        ("12345.6", "答案是1.23456万", 1.0),
        ("1.23456", "答案是1.23456万", 0.0),
        ("0.1", "答案是0.00001万元。", 1.0),
        ("10000.01", "答案是1.000001万", 1.0),
        # it shows one decimal, as "0.1" does: too coarse to be a rounding of the key
        ("0.1004", "答案是0.00001万元。", 0.0),
        # 千 and 百 alone, and compound units (千万 is 10^7, 万亿 10^12): read 5, 3, 30000
        ("5000", "5千", 1.0),
        ("5000", "答案是5千。", 1.0),
        ("500", "共5百人", 1.0),
        ("3000000000000", "3万亿", 1.0),
        ("30000", "3万亿", 0.0),
        ("30000000", "答案是3千万。", 1.0),
        ("300000", "约3十万人", 1.0),
        ("350000000", "答案是3亿5千万。", 1.0),
        ("5", "重5千克", 1.0),  # 千克 is a kilogram, 千米 a kilometre: no thousand
        ("5", "走了5千米", 1.0),
        ("5", "功率为5千瓦", 1.0),  # a kilowatt
        ("500", "热量为500千卡", 1.0),  # a kilocalorie
        ("5", "容量为5千升", 1.0),  # a kilolitre
        ("5", "释放了5千焦的热量", 1.0),  # a kilojoule
        ("5", "频率为5千赫", 1.0),  # a kilohertz
        ("5", "压强为5千帕", 1.0),  # a kilopascal
        ("5", "电压为5千伏", 1.0),  # a kilovolt
    ],
)
def test_number_grader_reads_numbers_written_in_chinese_text(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "why"),
    [
        ("1234", "1.234", "'1.234'"),  # a decimal point, as in English
        ("1.234", "1.234.567", "'1234567'"),
        ("15", "1½", "'3/2'"),  # not 1 then 1/2, nor 11/2
        ("1", "1 ½", "'3/2'"),
        ("234", "1 234", "'1234'"),  # plain spaces between thousands: not 234
        ("500", "The bag holds 2 500 grams.", "'2500'"),
        ("5", "Sorted: 1 5 120 346", "'346'"),  # a list, no thousands: "120 346" is not 120346
        ("1", "The total is ₹1,50,000.", "'150000'"),  # read 1 before
        ("12", "The answer is 12,34,567.", "'1234567'"),
        ("1", "The answer is 1'234'567.", "'1234567'"),
        ("5", "He is 5'10\" tall.", "'10'"),  # feet and inches, no thousands
        ("0", r"\boxed{1\ 000}", "'1,000'"),  # LaTeX's control space between thousands
        ("1", "Answer: 1 234,56", "'1234.56'"),  # read 1 before
        ("150", "The price is 1,50 €.", "a decimal comma or a list"),  # no thousands
    ],
)
def test_locale_formats_keep_their_one_reading(answer: str, output: str, why: str) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (0.0, None)
    assert why in result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("1.5", "1 1/2", 1.0),  # as "1½" is
        ("2.5", "The answer is 2 1/2 hours.", 1.0),
        ("-1.5", "x = -1 1/2", 1.0),
        ("12.25", "The answer is 12 1/4 inches.", 1.0),
        ("2.5", r"\boxed{2 1/2}", 1.0),
        ("0.5", "1 1/2", 0.0),  # not the fraction alone
        ("5.5", "1 1/2", 0.0),  # nor 11/2
        ("3.5", "2 3/2", 0.0),  # not a proper fraction: two numbers
        ("0.5", "He ate 1/3, she ate 1/2", 1.0),
    ],
)
def test_number_grader_reads_an_ascii_mixed_number(answer: str, output: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        # read 2 (or "two"): a wrong answer for 2.5, scored right against 2
        ("2.5", "The answer is 2 and a half hours.", 1.0),
        ("2", "The answer is 2 and a half hours.", 0.0),
        ("1.5", "It takes one and a half hours.", 1.0),
        ("1", "It takes one and a half hours.", 0.0),
        ("2500000", "The prize is 2 and a half million dollars.", 1.0),
        # not a part of a longer number in words
        ("2.5", "It takes twenty-two and a half hours.", 0.0),
    ],
)
def test_number_grader_reads_a_number_and_a_half(answer: str, output: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("output", "score_for_12", "score_for_14"),
    [
        ("The answer is 12. Wait, no: it is 14.", 0.0, 1.0),
        ("The answer is 12. Sorry, I meant 14.", 0.0, 1.0),
        ("The answer is 12. Actually, it's 14.", 0.0, 1.0),
        ("The answer is 12. Correction: 14.", 0.0, 1.0),
        ("12. No, it's 14 apples.", 0.0, 1.0),
        ("The answer is 12. No, it's 14: 3 boxes of 4 and 2 more.", 0.0, 1.0),
        ("The answer is 12. Hmm, actually, let me recount. The answer should be 14.", 0.0, 1.0),
        ("The answer is 12.\n\nOn second thought, the answer must be 14.", 0.0, 1.0),
        ("Answer: 12 ❌ → Corrected: 14", 0.0, 1.0),
        # a retraction takes back the answer before it, a first line's or a marker's
        ("12\n\nWait, actually 14.", 0.0, 1.0),
        ("12\n\nNo wait, 14.", 0.0, 1.0),
        ("The answer is 12.\n\nOops, I miscounted. There are 14 apples.", 0.0, 1.0),
        ("The answer is 12. I miscounted: there are 14 apples.", 0.0, 1.0),
        ("The answer is 12. I miscalculated: there are 14 apples.", 0.0, 1.0),
        ("The answer is 12. That’s wrong. It is 14.", 0.0, 1.0),  # a typographic apostrophe
        ("I got 12, but that seems wrong; it is 14", 0.0, 1.0),
        ("The answer is 12. Hmm, that seems wrong; it is 14.", 0.0, 1.0),
        ("The answer is 12. That looks incorrect. It is 14.", 0.0, 1.0),
        ("The answer is 12. This is wrong; it is 14.", 0.0, 1.0),
        ("The answer is 12. Sorry, make that 14.", 0.0, 1.0),
        ("The answer is 12. Oh actually, 14.", 0.0, 1.0),
        ("12\n\nThis seems wrong. Let me redo it: 14.", 0.0, 1.0),
        ("The answer is 12. That seems right: 14 - 2 = 12.", 1.0, 0.0),
        (
            "The answer is 12. Oops, I miscounted: the answer is 13. Oops, I miscounted again: 14.",
            0.0,
            1.0,
        ),
        ("The answer is 12. Wait, no, I made a mistake: 10 + 4 = 14.", 0.0, 1.0),
        ("The answer is 12? No: 14.", 0.0, 1.0),
        ("**Answer:** 12? No, 14 apples.", 0.0, 1.0),
        ("The answer is 12. No: 14.", 0.0, 1.0),  # a "No:" starting a sentence
        # a "No," right between two numbers, the second ending its sentence
        ("The answer is 12. No, 14.", 0.0, 1.0),
        ("The answer is 12.\n\nNo, 14 apples.", 0.0, 1.0),
        ("The answer is 12.\nNo — 14 apples.", 0.0, 1.0),
        ("The answer is 12. Note: 14 were seen, 2 twice.", 1.0, 0.0),
        ("The answer is 12.\n\nWait, let me verify: 12 apples + 2 pears = 14 fruits.", 1.0, 0.0),
        ("The answer is 12. If you got 14, that's wrong.", 1.0, 0.0),
        # no correction: the answer stands
        ("The answer is 12. No, it's not 14.", 1.0, 0.0),
        ("The answer is 12. No, 14 does not work.", 1.0, 0.0),
        ("The answer is 12. Wait, let me check: 14 - 2 = 12. Yes.", 1.0, 0.0),
    ],
)
def test_number_grader_follows_a_self_correction(
    output: str, score_for_12: float, score_for_14: float
) -> None:
    assert graded(number_task("12"), output).score == score_for_12
    assert graded(number_task("14"), output).score == score_for_14


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        # the grader does not compute: an answer stated as arithmetic is no number
        ("3", "Actually, it's 3 more than 9.", 0.0),
        ("9", "Actually, it's 3 more than 9.", 0.0),
        ("12", "The answer is 12. Actually, it's 3 more than 9, so 12.", 1.0),
        ("3", "The answer is 12. Actually, it's 3 more than 9, so 12.", 0.0),
        ("10", "The answer is 10. Actually, it's 3 more than 9.", 0.0),  # retracted
        ("5", "The answer is 5 + 3.", 0.0),
        ("4", "The result is 4 times 3, which gives 12 cookies.", 0.0),
        ("12", "The result is 4 times 3, which gives 12 cookies.", 1.0),
        ("12", "The answer is the sum of 5 and 7, which is 12.", 1.0),
        ("7", "The answer is the sum of 5 and 7, which is 12.", 0.0),
        ("12", "The answer is the product of 3 and 4, so 12 apples.", 1.0),
        ("7", "The answer is the sum of 5 and 7.", 0.0),
        ("6", "The answer is the average of 4 and 8: 6", 1.0),
        # the number before the operation counts when the operation gives it, as in a box
        ("12", "The answer is 12 = 3 * 4.", 1.0),
        ("12", "Answer: 12 = 3 × 4 apples", 1.0),
        ("12", "The answer is 12 = 3 + 4.", 0.0),  # a false equation: 7 or 12?
        ("12", "The answer is 12 = 3 * 4 + 1.", 0.0),  # the operation goes on
        ("12", "The answer is 12 = 3 * 4. I counted 5 rows.", 1.0),
        ("12", "The answer is 5 + 12 = 3 * 4.", 0.0),  # 12 is no side of it
        ("8", "The answer is 8 = 12 - 4.", 1.0),  # a '-' after the '=' subtracts (a range)
        ("9", "The answer is 9 = 12 - 4.", 0.0),
        ("8", "The answer is 9 = 12 - 4. So 8.", 1.0),  # as "... 12 = 3 + 4. So 7." reads 7
        ("12", "The answer is 12 = 2 * 3 * 2.", 1.0),  # a chain of operations too
        ("7", "The answer is 7 = 12 - 4 - 1.", 1.0),
        ("12", "The answer is 12 = 2 * 3 * 3.", 0.0),
        ("14", "The answer is 14 = 2 + 3 * 4.", 1.0),  # the marker's words are no operation
        # not arithmetic: the number stands
        ("3", "The answer is 3 more than yesterday.", 1.0),
        ("3", "The answer is 3 times.", 1.0),
        ("42", "The answer is 42 plus tax.", 1.0),
        ("12", "The answer is 12 (3 more than 9).", 1.0),
        ("3", "The answer is 3 fewer than 9.", 0.0),
    ],
)
def test_an_answer_stated_as_arithmetic_is_not_its_first_operand(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("18", "Answer:\n18\n\nExplanation: she sells 16 - 3 - 4 = 9 eggs at $2 each.", 1.0),
        ("18", "**Final Answer:**\n\n$18$\n\n(9 eggs at $2 each)", 1.0),
        ("18", "The final answer is:\n\n18 dollars\n\nShe sells 9 eggs at $2 each.", 1.0),
        ("18", "The answer is\n\\[\n18\n\\]\nsince 9 * 2 = 18 and 2 + 3", 1.0),
        ("260", "Answer:\n\\[ 260 \\]\n\nSeattle has 20, Charleston 4 times as many.", 1.0),
        ("2", "Answer:\n18\n\nExplanation: she sells 9 eggs at $2 each.", 0.0),
        # a next line that is more than a number: the usual rules
        ("18", "**Answer:**\n\n1. She has 16 eggs.\n2. She sells 9.\n\nSo she makes $18.", 1.0),
    ],
)
def test_number_grader_reads_the_answer_on_the_line_after_its_marker(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("41", "The answer is not 41.", 0.0),
        ("41", "The answer is not 41, it is 42.", 0.0),
        ("42", "The answer is not 41, it is 42.", 1.0),
        ("5", "So the answer is not 5. Let me recompute: 3 + 4 = 7.", 0.0),
        ("7", "So the answer is not 5. Let me recompute: 3 + 4 = 7.", 1.0),
        ("9", "The answer is not obvious, so check: 12 - 3 = 9.", 1.0),
    ],
)
def test_a_number_an_answer_marker_rules_out_is_not_the_answer(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("5", "5\n\nExplanation: 2 + 3 = 5, checked in 1 step.", 1.0),  # not the last 1
        ("12", "**12 apples**\nThat is 3 more than 9.", 1.0),
        ("8", "8\n(step 2 of 2)", 1.0),
        ("1", "5\n\nExplanation: 2 + 3 = 5, checked in 1 step.", 0.0),
        # a first line that is not only a number leaves the last number as the answer
        ("2", "Step 1\nAdd them: 1 + 1 = 2", 1.0),
        ("14", "1. First, 7 * 2 = 14\n2. Check: 14 / 7 = 2\nSo 14", 1.0),
        ("14", "12\nWait, no: it is 14.", 1.0),  # an answer marker still comes first
    ],
)
def test_number_grader_reads_a_first_line_holding_only_a_number(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "why"),
    [
        ("5", "The answer is 5 or 7.", "'5 or 7'"),
        ("5", "Final Answer: The final answer is $5$ and $7$. I hope it is correct.", "and"),
        ("7", "The answer is **5** or **7**.", "or"),
        ("5", "The answer is 5-7 days.", "'5-7'"),  # a range, or a subtraction not done
        ("7", r"\boxed{5-7}", "'5-7'"),
        ("-2", r"\boxed{8 = 5-7}", "'5-7'"),  # no result of it before its '='
        ("7", "Between 5 and 7", "'5 and 7'"),
        ("7", r"\boxed{5 \text{ or } 7}", "or"),
        ("5", "#### 5 or 7", "'5 or 7'"),
        ("3", "The answer is 3:30.", "time"),  # a time is not its hour
        ("30", "He arrives at 3:30.", "time"),
        ("30", r"\boxed{3:30}", "time"),
        ("3", r"The roots are \boxed{-2, 3}", "'-2, 3'"),  # a list where one number goes
        ("7", "#### 5, 7", "'5, 7'"),
        # also a chain's last side and the number after it (read 23 before)
        ("23", "#### 20 + 3 = 23 or 24", "'23 or 24'"),
        ("23", "#### 20 + 3 = 23, 24", "'23, 24'"),
        ("23", "#### 20 + 3 = 23:30", "time"),
        # and after the last side of an '=' with no operation (read 12 before)
        ("12", "#### 12 = 12 or 13", "'12 or 13'"),
        ("12", "#### 12 = 12, 13", "'12, 13'"),
        # and after an operation that gives the side before its '=' (read 12 before)
        ("12", "#### 12 = 3 * 4 or 13", "'4 or 13'"),
        ("12", "#### 12 = 2 * 3 * 2 or 13", "'2 or 13'"),  # after a chain of operations
        # a comma before the "or" or "and", a parenthesis or a "maybe" (read 5 or 6 before)
        ("5", "#### 5, or 6", "'5, or 6'"),
        ("6", r"\boxed{5, \text{or } 6}", "two numbers"),
        ("5", "#### 5, and 6", "'5, and 6'"),
        ("5", "#### 5 (or 6)", "two numbers"),
        ("5", "#### 5 or maybe 6", "'5 or maybe 6'"),
        ("5", "#### 5 or possibly 6", "two numbers"),
        ("5", "#### 5 or perhaps 6", "two numbers"),
        ("5", "#### 5 (*or* 6)", "two numbers"),  # markdown inside the parenthesis
        # a unit after the first of two numbers joined by "or" hides no hedge (read 18 or 5)
        ("18", "#### 18 eggs or 19", "'18 eggs or 19'"),
        ("5", "#### 5 m or 6 m", "'5 m or 6'"),  # a unit of one letter too
        ("5", "#### 5 apples, or 7 apples", "'5 apples, or 7'"),
        ("5", r"\boxed{5 \text{ apples or } 7}", "two numbers"),
        ("5", "The answer is 5 apples or 7 apples.", "'5 apples or 7' after 'answer is'"),
        ("7", "She has 5 apples or 7 apples.", "'5 apples or 7' at the end"),
        ("5", "Actually 5 apples or 6.", "'5 apples or 6' after 'Actually'"),
        # the same unit after the second number, however written, keeps the hedge
        ("3", "The answer is 3 m or 4 m.", "'3 m or 4' after 'answer is'"),
        ("5", "#### 5 hours or 6 hour", "'5 hours or 6'"),
        ("5", "#### 5 boxes or 6 box", "'5 boxes or 6'"),
        ("3", "#### 3 m or 4 meters", "'3 m or 4'"),
        ("5", "#### 5 apples or 6 apple", "'5 apples or 6'"),
        ("5", "#### 5 Apples or 6 apples", "'5 Apples or 6'"),
        # a word after it that names no unit leaves it a hedge
        ("5", "#### 5 apples or 6 in all", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 if one is rotten", "'5 apples or 6'"),
        ("5", "#### 5 APPLES OR 6 IN ALL", "'5 APPLES OR 6'"),
        ("5", "#### 5 apples or 6 and no more", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 or 7", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 of them", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 to be safe", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 for both", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 is fine", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 are left", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 at most", "'5 apples or 6'"),
        ("5", "#### 5 apples or 6 by my count", "'5 apples or 6'"),
        # a comparative after it names no unit either: 7 more apples, not 1 in another unit
        ("5", "#### 5 apples or 7 more", "'5 apples or 7'"),
        ("5", "The answer is 5 apples or 7 more.", "'5 apples or 7' after 'answer is'"),
        ("5", "#### 5 apples or 7 fewer", "'5 apples or 7'"),
        ("5", "#### 5 apples or 7 less", "'5 apples or 7'"),
        # the two roots of an equation, each with its variable
        ("-3", "x = 3 or x = -3", "'3 or x = -3'"),
        ("7", "The solutions are x = 5 and x = 7.", "and"),
        ("7", "The answer is x = 5 or x = 7.", "or"),
        ("7", r"\boxed{x = 5 \text{ or } x = 7}", "or"),
        ("7", r"\boxed{x_1 = 5, x_2 = 7}", "'5, x_2 = 7'"),
        # "±3" is both roots too
        ("3", "x = ±3", "'3 or -3'"),
        ("-3", r"\boxed{\pm 3}", "'3 or -3'"),
        ("3", "The answer is ±3.", "'3 or -3'"),
        ("0.5", r"x = +/- 1/2.", "'1/2 or -1/2'"),
        # a comma with no space: a decimal comma (1.5) or a list (1 and 5), never 1 alone
        ("1", "The answer is 1,5.", "decimal comma or a list"),
        ("3", "π ≈ 3,14", "'3,14'"),
        ("5", "x = 1,5", "'1,5'"),
    ],
)
def test_two_numbers_as_one_answer_are_ambiguous(answer: str, output: str, why: str) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (0.0, None)
    assert why in result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("12", "The answer is 12 and the remainder is 3."),
        ("6", "We need 5 or more boxes, so 6."),
        ("2", "The ratio is 2:1, so the answer is 2."),
        ("1500", "The answer is 1,500."),
        ("3", "The answer is 3, since 1,2 and 3 are listed."),
        ("-7", r"\boxed{-7}"),
        ("1000", r"\boxed{1,000}"),
        ("18", "The answer is 18, 2 more than 16."),
        ("0.25", "The answer is 1/4 or 25%."),  # one value written two ways
        ("0.25", r"\boxed{\frac{1}{4} \text{ or } 25\%}"),
        ("7", "x = 7 or x = 7.0"),  # one root, twice
        ("23", "#### 20 + 3 = 23 or 23.0"),
        ("12", "#### 12 = 12 or 12.0"),
        ("7", "The answer is 3 + 4 = 7."),
        ("12", "We have x = 5 and y = 7, so x + y = 12."),
        ("5", "The answer is 5 ± 0.1 cm."),  # a tolerance, not two answers
        ("4", "The answer is 4 (±0.5)."),
        # two quantities joined by "and" are no hedge, unlike "5 apples or 7 apples"
        ("5", "The answer is 5 boxes and 20 pens."),
        ("5", "#### 5 boxes and 20 pens"),
        ("6", "We need 5 boxes or more, so 6."),
        ("7", "#### 7 apples or fewer"),
        ("7", "The answer is 7 apples or more."),
        # a second number in another unit restates the first, which is the answer (read as
        # two numbers after 5ffb3e0b)
        ("60", "#### 60 minutes or 1 hour"),
        ("60", "The answer is 60 minutes or 1 hour."),
        ("1", "The answer is 1 hour or 60 minutes."),
        ("100", "The answer is 100 cm or 1 m."),
        ("2", "The answer is 2 km or 2000 m."),
        ("12", "#### 12 eggs, or 1 dozen"),
        ("14", "#### 14 days or 1 fortnight"),  # a unit the grader does not know
        ("60", "The answer is **60** minutes or **1** hour."),
        ("60", "The answer is **60 minutes** or **1 hour**."),
        ("60", "#### 60 MINUTES OR 1 HOUR"),
        # in a box too (read 1, 60 and 1 before)
        ("60", r"\boxed{60 \text{ minutes or } 1 \text{ hour}}"),
        ("60", r"\boxed{60 minutes or 1 hour}"),
        ("1", r"\boxed{1 \text{ hour or } 60 \text{ minutes}}"),
        ("12", r"\boxed{12 \text{ eggs, or } 1 \text{ dozen}}"),
        ("12", r"\boxed{12 \text{ eggs, or about } 1 \text{ dozen}}"),  # as after ####
        ("12", "#### 12 eggs, or about 1 dozen"),
        # with no marker too (read 1, 60 and 1 before), when "or" joins the two
        ("60", "So it takes 60 minutes or 1 hour."),
        ("1", "So it takes 1 hour or 60 minutes."),
        ("12", "We need 12 eggs or 1 dozen."),
        ("1", "He walked 60 minutes or so, then rested 1 hour."),
        # the grader does not tell a restatement from another thing: the first is read
        ("5", "The answer is 5 apples or 7 oranges."),
    ],
)
def test_one_answer_next_to_other_numbers_still_counts(answer: str, output: str) -> None:
    result = graded(number_task(answer), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("0.25", "1 in 4", 1.0),
        ("1/4", "The probability is 1 in 4.", 1.0),
        ("0.25", "There is a one in four chance.", 1.0),
        ("4", "1 in 4", 0.0),  # a chance is not its last number
        ("10", "She did it 7 in 10 days", 1.0),  # not a chance
        ("3", "The answer is 3 in 4 cases", 1.0),
    ],
)
def test_number_grader_reads_one_in_n_as_a_chance(answer: str, output: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


GIVE_AWAY = "Tom has 8 apples and gives away 3. How many apples does he have left?"
LARGER_OF_TWO = "Which is larger, 9 or 3?"
CARL_ATE = "Ann ate 3 pears and Bob ate 5. Carl ate as many as Ann. How many did Carl eat?"
ATE_FOUR = "Tom bought 8 apples and ate 4. How many are left?"
BOB_ATE = "Ann ate 3 pears. Bob ate as many as Ann. How many did Bob eat?"
COWS = "A farmer has 10 cows. He buys 5 more and sells 5. How many cows does he have?"


@pytest.mark.parametrize(
    ("prompt", "answer", "output", "score"),
    [
        (GIVE_AWAY, "5", "5 apples. Tom started with 8 and gave away 3.", 1.0),
        (GIVE_AWAY, "5", "**5** apples remain.\n\nTom started with 8 and gave away 3.", 1.0),
        (GIVE_AWAY, "3", "5 apples. Tom started with 8 and gave away 3.", 0.0),
        # the answer before the whole it is out of (3 was read: 8 taken for the answer)
        (GIVE_AWAY, "5", "He keeps 5 of 8. He started with 8 and gave away 3.", 1.0),
        (GIVE_AWAY, "3", "He keeps 5 of 8. He started with 8 and gave away 3.", 0.0),
        # a closing sentence with a result, or after a question's number, may be the answer
        (GIVE_AWAY, "5", "He gives away 3 of 8. So he has 8 - 3 = 5.", 1.0),
        (LARGER_OF_TWO, "9", "Compare 9 and 3. The larger is 9.", 1.0),
        (LARGER_OF_TWO, "9", "The difference is 6. Of 3 and 9, 9 is larger.", 1.0),
        # one number of the question's, after the word it follows there (read 5 before)
        (GIVE_AWAY, "5", "He has 5 apples left. He gave away 3.", 1.0),
        (GIVE_AWAY, "3", "He has 5 apples left. He gave away 3.", 0.0),
        (GIVE_AWAY, "5", "**5** apples.\nTom gave away 3 of them.", 1.0),
        # said anew, or as a state ("has"), it may be the answer
        (GIVE_AWAY, "3", "He has 5 apples left. He gave his friend 3.", 1.0),
        (COWS, "10", "He had 15 then. He has 10 cows.", 1.0),
        # only the setup restated, no answer: neither number (read 4, the last)
        (ATE_FOUR, "4", "He bought 8. He ate 4.", 0.0),
        (ATE_FOUR, "8", "He bought 8. He ate 4.", 0.0),
        (ATE_FOUR, "4", "He has 4 left. He ate 4.", 1.0),  # "has": a result said anew
        (ATE_FOUR, "4", "He bought 8. He ate 4. So 4 are left.", 1.0),
        # one of the question's events said twice: the second is the reply's own (Bob's)
        (BOB_ATE, "3", "Ann ate 3. Bob ate 3.", 1.0),
        (BOB_ATE, "3", "Ann ate 3 pears, Bob ate 3.", 1.0),
        # one number after the question's word may be the answer said anew
        (BOB_ATE, "3", "Bob ate 3.", 1.0),
        # a result said ("so") with the question's words: the answer, not a restatement
        (CARL_ATE, "3", "Ann ate 3 and Bob ate 5, so Carl ate 3.", 1.0),
    ],
)
def test_a_closing_sentence_restating_the_question_is_not_the_answer(
    prompt: str, answer: str, output: str, score: float
) -> None:
    task = Task(id="n", prompt=prompt, answer=answer, grader="number", task="math")
    result = graded(task, output)
    assert (result.score, result.error) == (score, None), result.detail


def test_closing_sentences_are_read_in_linear_time() -> None:
    task = Task(id="n", prompt=GIVE_AWAY, answer="5", grader="number", task="math")
    started = time.process_time()
    assert graded(task, "5. " + "He had 8 and gave 3. " * 30_000).score is not None
    assert graded(task, "5 " + ". " * 100_000 + "8 and 3").score == 1.0
    # the word before a number is looked for just before it, not in a run of letters before
    assert graded(task, "5 apples. He " + "a" * 50_000 + " gave away 3.").score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("prompt", "answer", "output", "score"),
    [
        # a reference rounded to many decimals: an answer rounded to fewer counts...
        ("What is 4 divided by 3?", "1.333333", "1.33", 1.0),
        ("What is 2 divided by 3?", "0.666667", "0.67", 1.0),
        ("What is 2 divided by 3?", "0.666667", "0.66", 0.0),  # not its rounding
        ("What is 4 divided by 3?", "1.333333", "1.3", 0.0),  # one decimal is too coarse
        ("What is 4 divided by 3?", "1.3333", "1.33", 1.0),  # 4 decimals are a rounding
        ("What is 9 divided by 3?", "3", "3.41", 0.0),  # at the answer's 2 decimals
        # as 0.0046 would: 4.6 × 10^-3 shows 4 decimals
        ("What is the concentration in mol/L?", "0.004567", "4.6 × 10^-3 mol/L", 1.0),
        # ...unless the question asks for more decimals than it gives
        ("What is 4/3 to 6 decimal places?", "1.333333", "1.33", 0.0),
        ("What is 4/3 to 2 decimal places?", "1.333333", "1.33", 1.0),  # the decimals asked
        ("Give 4/3 to six decimal places.", "1.333333", "1.33333", 0.0),
        # a more precise answer that rounds to the reference counts
        ("What is 4 divided by 3?", "1.33", "1.333333", 1.0),
        ("Round 4/3 to two decimal places.", "1.33", "1.333333", 1.0),
        ("What is 2/3 to the nearest hundredth?", "0.67", "0.6667", 1.0),
        # an exact reference of few digits is no rounding
        ("What is 0.1 times 0.5?", "0.05", "0.054", 0.0),
        ("What is 0.06 times 0.9?", "0.054", "0.05", 0.0),
        ("What is 0.3 times 0.5?", "0.15", "0.154", 0.0),
        ("What is 25 divided by 2?", "12.5", "12.54", 0.0),
        # a reference of fewer decimals than asked is exact: 0.050
        ("What is 0.1 times 0.5, to the nearest thousandth?", "0.05", "0.054", 0.0),
        ("What is 1/3 to the nearest thousandth?", "0.333333", "0.33", 0.0),  # fewer than asked
        # a float32 result, off in its last digit: within 1e-6 relative of a computed key
        ("What is the square root of 0.5?", "0.7071067811865476", "0.70710677", 1.0),
        ("What is the square root of 0.5?", "0.7071067811865476", "0.7071", 1.0),
        ("What is the square root of 0.5?", "0.7071067811865476", "0.70712", 0.0),
    ],
)
def test_number_grader_accepts_a_rounding_at_the_precision_shown_or_asked(
    prompt: str, answer: str, output: str, score: float
) -> None:
    task = Task(id="n", prompt=prompt, answer=answer, grader="number", task="math")
    result = graded(task, output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("three even numbers (8, 10, 12)", 1.0),
        ("There are three even numbers: 8, 10 and 12.", 1.0),
        ("The answer is three (8, 10, 12).", 1.0),
        ("Two: 8 and 10.", 0.0),
        ("There are three: 8, 10, 12, 7.", 0.0),  # not the count of the list
        ("Three of them are even, 8 and 12 and 10 - 2.", 0.0),  # more than a list
    ],
)
def test_a_count_in_words_before_the_numbers_it_counts_is_the_answer(
    output: str, score: float
) -> None:
    task = Task(
        id="n",
        prompt="How many even numbers are in the list [3, 8, 10, 12, 7]?",
        answer="3",
        grader="number",
        task="lists",
    )
    result = graded(task, output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("5", "x = 5 (since 2x = 10)", 1.0),
        ("12", "She has 12 apples left (15 - 3).", 1.0),
        ("18", "Janet makes $18 per day ($9 × 2).", 1.0),
        ("3", "She has 12 apples left (15 - 3).", 0.0),
        # the working in words, and in a clause after a comma (20 is no number of the
        # question's, so the rule for restating the question does not read it)
        ("17", "17 apples left (20 minus 3).", 1.0),
        ("3", "17 apples left (20 minus 3).", 0.0),
        ("2.5", "2.5 hours (150 divided by 60).", 1.0),
        ("17", "17 left, from 20 minus 3.", 1.0),
        ("3", "17 left, from 20 minus 3.", 0.0),
        ("17", "He has 17 apples left, i.e. 20 - 3.", 1.0),
        ("17", "17 apples are left, which is 20 minus 3.", 1.0),
        ("17", "He has 17 apples left, that is, 20 - 3.", 1.0),
        # "which is" after no comma ("left which is 20 minus 3") is such a clause too
        ("17", "He has 17 apples left which is 20 minus 3.", 1.0),
        ("3", "He has 17 apples left which is 20 minus 3.", 0.0),
        ("12", "The total is 5 + 7 which is 12.", 1.0),
        ("15", "The discount is $15 (25% × $60).", 1.0),  # a percentage as an operand
        ("12", "He has 12 eggs (given 3 boxes of 4).", 1.0),
        ("12", "He has 12 eggs (as each of 3 boxes holds 4).", 1.0),
        ("17", "There are 17 apples left $(20 - 3)$", 1.0),  # in LaTeX math
        # such a clause is working only when it ends the output
        ("22", "He has 17 left, from 20 minus 3. He then buys 5 more, so 22.", 1.0),
        ("24", "There are 24 eggs (4 times 6).", 1.0),
        ("18", "Janet makes $18 a day (via 9 eggs × $2).", 1.0),
        # a clause of working tens of characters long
        ("1250", "She has $1,250 left, i.e. $2,000 in savings minus $750 in rent.", 1.0),
        # operands that say what they count in a few words
        ("24", "There are 24 eggs (4 boxes × 6 eggs each).", 1.0),
        ("6", "There are 24 eggs (4 boxes × 6 eggs each).", 0.0),
        ("12", "It costs $12 ($10 plus $2 in tax).", 1.0),
        ("2", "It costs $12 ($10 plus $2 in tax).", 0.0),
        ("45", "She earns $45 (3 hours × $15 an hour).", 1.0),
        ("12", "He pays $12 ($10 for the shirt + $2 tax).", 1.0),
        ("7", "He walked 7 miles (3 miles on Monday plus 4 miles on Tuesday).", 1.0),
        # a parenthetical that gives the answer stays
        ("12", "Total: 5 + 7 (= 12)", 1.0),
        ("12", "The sum is 5 + 7 (i.e. 12).", 1.0),
        ("12", "The total is 5 + 7, which is 12.", 1.0),
        ("10", "The value is (5 + 5)", 0.0),  # the working and nothing else: no answer
        ("391", "The product is 391 (17 × 20 = 340, 17 × 3 = 51).", 1.0),
        ("18", "She makes 18 dollars. (Note: this assumes all 9 eggs sell at $2.)", 1.0),
        ("18", "She makes $18 a day (assuming 9 eggs sell at $2 each).", 1.0),
        ("391", "391 trees (17 x 20 = 340 and 17 x 3 = 51)", 1.0),
        ("51", "The product is 391 (17 × 20 = 340, 17 × 3 = 51).", 0.0),
        ("391", "The product is (17 × 20 = 340, 17 × 3 = 51) 391.", 1.0),
        # closing instructions for the computation, with no result, are working too
        ("10", "10 m/s. To convert, multiply 36 by 1000 and divide by 3600.", 1.0),
        ("10", "10 m/s\n\nTo convert, multiply 36 by 1000 and divide by 3600.", 1.0),
        ("2.5", "2.5 hours. Just divide 150 by 60.", 1.0),
        ("5", "5 apples. Multiply 2 by 4, then subtract 3.", 1.0),
        ("3600", "10 m/s. To convert, multiply 36 by 1000 and divide by 3600.", 0.0),
        # a step's result on the way is working too
        ("15", "15 apples. First multiply 3 by 4 to get 12, then add 3.", 1.0),
        ("15", "He has 15 apples.\nTo find it, multiply 3 by 4 = 12 and add 3.", 1.0),
        # instructions that reach a result end with it
        ("10", "36 km/h. Multiply 36 by 1000 and divide by 3600, giving 10 m/s.", 1.0),
        ("10", "Multiply 36 by 1000 and divide by 3600 to get 10.", 1.0),
        ("17", "12 apples. Add 5 more and you have 17.", 1.0),
    ],
)
def test_a_closing_parenthetical_showing_the_working_is_not_the_answer(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        # the grader does not compute π or roots: their coefficient or radicand is no answer
        ("4", r"The answer is $\boxed{4\pi}$.", 0.0),
        ("3", r"\boxed{2\sqrt{3}}", 0.0),
        # in a box, a constant's name too: "3 pi" is "3π" (read 11.42 and 3 before), as
        # after #### ("#### 2 + 3 pi = 11.42" is an expression)
        ("11.42", r"\boxed{2 + 3 pi = 11.42}", 0.0),
        ("11.42", r"\boxed{2 + 3 Pi = 11.42}", 0.0),
        ("3", r"\boxed{3 pi}", 0.0),
        ("3", r"\boxed{3pi}", 0.0),
        ("3", r"\boxed{3 pies}", 1.0),
        ("5", r"\boxed{5 \text{ api calls}}", 1.0),
        # and out of a box, as "The answer is 3π." (read 3 before)
        ("3", "The answer is 3 pi.", 0.0),
        ("3", "The answer is 3 PI.", 0.0),
        ("3", "#### 3 pi", 0.0),
        ("3", "So it is 3pi.", 0.0),
        ("3", "The answer is 3 pies.", 1.0),
        ("3", "#### 3 pies", 1.0),
        ("12.566", "The area is 4 pi ≈ 12.566.", 1.0),
        ("4", "The area is 4π.", 0.0),
        ("3", "x = 2√3", 0.0),
        ("2", r"x = \sqrt{2}", 0.0),
        # a value given after them counts
        ("12.566", "The area is 4π ≈ 12.566.", 1.0),
        ("12.57", r"The area is $4\pi \approx 12.57$.", 1.0),
        ("9", r"The answer is \sqrt{81} = 9.", 1.0),
        ("3", "The answer is √9 = 3", 1.0),
    ],
)
def test_a_symbolic_answer_is_not_its_coefficient(answer: str, output: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


def test_subtraction_is_not_a_negative_number() -> None:
    assert graded(number_task("5"), "10-5=5").score == 1.0


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("-7", "The temperature is minus 7 degrees.", 1.0),
        ("-7", "The answer is minus 7.", 1.0),
        ("7", "The answer is minus 7.", 0.0),
        ("3", "10 minus 7 is 3.", 1.0),  # a subtraction, not a sign
        ("10", "The answer is 10  minus 7.", 0.0),
        ("3", "$10 minus $7 = $3", 1.0),
        # a sign after a word, also after a comma
        ("-3", "The high was 5 degrees, minus 3 at night.", 1.0),
        ("-3", "The temperature went from 5 to minus 3.", 1.0),
    ],
)
def test_minus_before_a_number_is_its_sign(answer: str, output: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("-7", "The answer is negative seven.", 1.0),
        ("7", "The answer is negative seven.", 0.0),  # scored 1 before
        ("-12", "He had 3 apples. The answer is minus twelve apples.", 1.0),
        ("3", "He had 3 apples. The answer is minus twelve apples.", 0.0),
        ("-3", "Minus three.", 1.0),
        ("3", "Ten minus seven is three.", 1.0),  # a subtraction, not a sign
        ("-7", "ten minus seven", 0.0),
    ],
)
def test_negative_or_minus_before_a_number_in_words_is_its_sign(
    answer: str, output: str, score: float
) -> None:
    """ "negative seven" was read as 7 (scored 1 for 7, 0 for -7), where "negative 7" is -7."""
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("7", "It takes 5-7 days"),  # a range hedges
        ("7", "It takes 5 - 7 days."),
        ("7", "Between $5-$7"),
        ("3", "So we compute 15-3"),  # a subtraction not done answers neither number
        ("12", "So we compute 15 \u2013 3"),
    ],
)
def test_a_range_or_subtraction_at_the_end_is_no_answer(answer: str, output: str) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (0.0, None)
    assert "two numbers" in result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("3", "He spent 20 minus 3 dollars."),  # read 3
        ("17", "He spent 20 minus 3 dollars."),
        ("3", "He spent $20 minus $3."),
        ("-3", "The value is 20, minus 3"),  # read -3: the minus as its sign
        ("-3", "The price is $20, minus $3."),
    ],
)
def test_a_subtraction_in_words_not_done_at_the_end_is_no_answer(answer: str, output: str) -> None:
    """As "15-3" is no answer, nor is its subtrahend (3, or -3 after a comma)."""
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (0.0, None)
    assert "an expression" in result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("3", "He spent 20 plus 3 dollars."),  # read 3
        ("23", "He spent 20 plus 3 dollars."),
        ("3", "The value is 20 + 3"),
        ("3", "The price is $20 + $3."),
        ("3", "The value is 20 times 3."),
        ("60", "The value is 20 times 3."),
        ("3", "The area is 20 × 3"),
        ("3", "Each gets 12 divided by 3."),
        ("4", "Each gets 12 ÷ 4"),
    ],
)
def test_a_sum_or_product_not_done_at_the_end_is_no_answer(answer: str, output: str) -> None:
    """As "20 minus 3" is no answer, nor is the last operand of another operation."""
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (0.0, None)
    assert "an expression" in result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ("23", "The value is 20 + 3 = 23."),
        ("60", "20 times 3 is 60."),
        ("-3", "x = -3"),
        ("-3", "2x + 6 = 0, so x = -3"),
        ("-3", "The temperature went from 5 to -3"),
        ("-3", "The values are 5, then -3"),
        ("12", "15 - 3 = 12"),
        ("5", "5-5"),  # one value twice is one answer
    ],
)
def test_negative_numbers_and_done_subtractions_still_count(answer: str, output: str) -> None:
    result = graded(number_task(answer), output)
    assert result.score == 1.0, result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("-12", r"The profit is -\$12.", 1.0),
        ("12", r"The profit is -\$12.", 0.0),  # scored 1 before: the sign was lost
        ("-1200", r"**Answer:** −\$1,200", 1.0),
        ("12", r"It costs \$12.", 1.0),
        ("3000000", r"The prize is \$3M.", 1.0),
    ],
)
def test_a_minus_before_a_dollar_escaped_in_markdown_is_its_sign(
    answer: str, output: str, score: float
) -> None:
    """Markdown escapes a dollar sign ("\\$12", so that it opens no LaTeX math): "-\\$12" was
    read as 12."""
    result = graded(number_task(answer, "What was his profit?"), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        # off in the last digits: within 1e-6 relative of the key, so scored 1 before
        ("7006652", "1234 × 5678 = 7006653", 0.0),
        ("1000000", "The answer is 1000001.", 0.0),
        ("1000000", "The answer is $1,000,001.00", 0.0),
        ("-1000000", "The answer is -1,000,001.", 0.0),
        ("1000000", "It is 1000000 or 1000001.", 0.0),  # two answers, not one value twice
        # a whole key written with decimals (a float column's CSV): scored 1 after that fix
        ("7006652.0", "1234 × 5678 = 7006653", 0.0),
        ("1000000.00", "The answer is $1,000,001.00", 0.0),
        ("1000000.00", "The answer is $1,000,000", 1.0),
        # the same number, float noise, or a rounding not written digit by digit still count
        ("1000000", "The answer is $1,000,000.00", 1.0),
        ("1000000", "The answer is 999999.9999999999", 1.0),
        ("1234567891", "The answer is 1.2345678e9", 1.0),
        ("1000000", "The answer is 1 million.", 1.0),
    ],
)
def test_a_whole_number_off_in_its_last_digits_is_wrong(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer, "What is 1234 * 5678?"), output)
    assert (result.score, result.error) == (score, None), result.detail


def test_a_run_of_hundreds_of_digits_is_a_wrong_number_not_a_grading_error() -> None:
    result = graded(number_task("7"), "7 " + "9" * 400)  # small models repeat digits
    assert (result.score, result.error) == (0.0, None)
    assert graded(number_task("7"), "-" + "9" * 400 + " so the answer is 7").score == 1.0


def test_thousands_of_repeated_digits_are_a_wrong_number_not_a_grading_error() -> None:
    result = graded(number_task("7"), "The answer is " + "1" * 100_000)  # past int's 4300 digits
    assert (result.score, result.error) == (0.0, None)
    assert len(result.detail) < 200
    assert graded(number_task("7"), "1" * 5000 + "\nThe answer is 7.").score == 1.0
    assert graded(number_task("7"), "7/" + "1" * 5000).score == 0.0
    # before 万 (ten thousand), as a number or its decimals: a ValueError before
    for output in ("答案是" + "1" * 5000 + "万", "答案是1." + "1" * 5000 + "万"):
        in_chinese = graded(number_task("7"), output)
        assert (in_chinese.score, in_chinese.error) == (0.0, None)


@pytest.mark.parametrize(
    "output",
    [
        "The answer is 7. " + "The answer is " * 10_000,  # a small model stuck in a loop
        "Answer: 7\n" + "Answer: = " * 10_000,
        "1 " * 200_000 + "so the result is 7",
        "1/" * 200_000 + "\n#### 7",
        "Answer:\n" * 100_000 + "7",
        "one a million " * 50_000 + "\nThe answer is 7",
        "1 in 4 " * 50_000 + "1 in" + " " * 100_000 + "\nThe answer is 7",
        "7 (" + "1 + " * 100_000 + "1)",
        "7 (" + "1 + 1 = 1,1, " * 30_000 + "1 + 1 = 2)",  # steps of the working
        "7 (" + "1 x 1 = 1, " * 20_000 + "1 x 1 = 1)",
        "(" * 100_000 + "7",
        "He has 7 apples." + "\n" * 100_000 + "Done.",  # a model stuck on blank lines
    ],
)
def test_number_grader_takes_linear_time_on_long_repetitive_outputs(output: str) -> None:
    # CPU time, not wall time: a loaded CI machine must not fail it; a quadratic pass still does
    started = time.process_time()
    assert graded(number_task("7"), output).score == 1.0
    assert time.process_time() - started < LINEAR_CPU_S


REMAINDER = "What is the remainder when 15 is divided by 4? Answer with just the number."
APPLES = "Sam has 15 apples and gives away 3. How many apples does Sam have now?"
SAVINGS = "Sam saves $5 a week. How many weeks until he has $20?"
BUY = "Tom has 12 apples. He gets 8 more and gives away 5. How many apples does he have now?"
BUY_TWICE = "Tom has 12 apples. He gets 8, then 4 more and gives away 5. How many has he now?"
LARGEST = "What is the second largest number in the list [12, 45, 7, 33]?"
EVENS = "How many even numbers are in the list [3, 8, 10, 5, 7, 12, 9]?"
MAXIMUM = "What is the largest number in the list [3, 9, 4]?"
MEDIAN = "What is the median of the list [3, 9, 4]?"
BUY_THRICE = "Tom has 12 apples. He gets 8, then 4, then 6 more and gives away 5. How many now?"
LARGEST_OF_SEVEN = "What is the largest number in the list [3, 9, 4, 11, 2, 6, 8]?"
MEDIAN_OF_SEVEN = "What is the median of the list [3, 9, 4, 11, 2, 6, 8]?"
HOURS = "How many minutes are in 4 hours? Answer with just the number."
CM_IN_METERS = "How many centimeters are in 3 meters?"
DOZENS = "How many items are in 5 dozens? Answer with just the number."


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        # a closing clause restating the question's numbers is not the answer
        (REMAINDER, "The remainder is 3 when 15 is divided by 4.", "3", 1.0),
        (REMAINDER, "The remainder is 3 when 15 is divided by 4.", "4", 0.0),
        (
            REMAINDER,
            "The remainder is 3 apples left over in the basket when 15 is divided by 4.",
            "3",
            1.0,
        ),
        (APPLES, "Sam has 12 apples left after giving away 3.", "12", 1.0),
        (APPLES, "Sam has 12 apples left after giving away 3.", "3", 0.0),
        (APPLES, "Sam now has 12 apples, since he started with 15 and gave away 3.", "12", 1.0),
        # the question's quantity after "in": "There are 240 minutes in 4 hours." for "How
        # many minutes are in 4 hours?", the unit family's question, answered 4
        (HOURS, "There are 240 minutes in 4 hours.", "240", 1.0),
        (HOURS, "There are 240 minutes in 4 hours.", "4", 0.0),
        (HOURS, "There are 240 minutes in 4 hours.", "60", 0.0),
        (DOZENS, "There are 60 items in 5 dozens.", "60", 1.0),
        # a clause with a number of its own may hold the answer
        (SAVINGS, "He will have $20 after 4 weeks.", "4", 1.0),
        (SAVINGS, "He has $20 in 4 weeks.", "4", 1.0),
        (REMAINDER, "When 15 is divided by 4, the remainder is 3.", "3", 1.0),
        # an explanation after a dash, a colon, in parentheses or in a note, alike
        (BUY, "15 (Tom had 12, got 8, gave 5)", "15", 1.0),
        (BUY, "15 (Tom had 12, got 8, gave 5)", "5", 0.0),
        (BUY_TWICE, "19 (Tom had 12, got 8 and 4, gave 5)", "19", 1.0),  # four restated
        (BUY, "15 — Tom had 12, got 8 more, and gave away 5.", "15", 1.0),
        (BUY, "Tom has 15 apples: he had 12, got 8, and gave away 5.", "15", 1.0),
        (BUY, "He has 15.\nNote: Tom started with 12.", "15", 1.0),
        # also when the answer is one of the question's numbers
        (EVENS, "There are 3 even numbers: 8, 10, and 12.", "3", 1.0),
        (EVENS, "3 (8, 10, 12)", "3", 1.0),
        (EVENS, "3 (8, 10, 12)", "12", 0.0),
        (LARGEST, "33 (the largest is 45)", "33", 1.0),
        (LARGEST, "The second largest number is 33, after 45.", "33", 1.0),
        (EVENS, "The even numbers are 8, 10, and 12. So there are 3 even numbers.", "3", 1.0),
        # the answer stated again after a colon is no explanation
        (MAXIMUM, "Comparing 3 and 9: 9 is larger.", "9", 1.0),
        (MAXIMUM, "Comparing: 3 < 9, 4 < 9. The largest: 9", "9", 1.0),
        # the question's number twice, the explanation before them both
        ("What is 8 times 8?", "64 when you multiply 8 by 8.", "64", 1.0),
        # with no explanation before them, the question's numbers may be the answer
        (LARGEST, "The sum is 57, so the second largest is 12.", "12", 1.0),
        (BUY, "12 + 8 = 20 - 5", "20", 0.0),
        # more than 4 restated, up to as many as the question gives (read 5, the last)
        (BUY_THRICE, "25 (Tom had 12, got 8, 4 and 6, gave 5)", "25", 1.0),
        (BUY_THRICE, "25 (Tom had 12, got 8, 4 and 6, gave 5)", "5", 0.0),
        (BUY_THRICE, "25 — Tom had 12, got 8, then 4, then 6 more, and gave away 5.", "25", 1.0),
        # but not a bare list past 4, nor all of a list's numbers and the answer again
        (LARGEST_OF_SEVEN, "Step 1: sort the list: 2, 3, 4, 6, 8, 9, 11", "11", 1.0),
        (
            MEDIAN_OF_SEVEN,
            "The sum is 43; sorted: 2, 3, 4, 6, 8, 9, 11 and the median is 6",
            "6",
            1.0,
        ),
        # an explanation that ends, or concludes, before the last number lets it answer
        (MEDIAN, "The sum is 16. Sorted: 3, 4, 9. The median is 4.", "4", 1.0),
        (MEDIAN, "The sum is 16; sorted: 3, 4, 9, so the median is 4", "4", 1.0),
        (MEDIAN, "The sum is 16; sorted: 3, 4, 9, hence the median is 4", "4", 1.0),
        (COWS, "He had 15 after buying. He has 10 cows.", "10", 1.0),
    ],
)
def test_a_closing_clause_restating_the_question_is_not_the_answer(
    prompt: str, output: str, answer: str, score: float
) -> None:
    task = Task(id="n", prompt=prompt, answer=answer, grader="number", task="math")
    result = graded(task, output)
    assert result.score == score, result.detail


def test_a_closing_clause_takes_linear_time() -> None:
    task = Task(id="n", prompt="What is 1 + 1?", answer="2", grader="number", task="math")
    started = time.process_time()
    assert graded(task, "It is 2" + " when 1 is added to 1" * 30_000).score is not None
    assert graded(task, "It is 2" + " when 1" * 50_000 + ".").score is not None
    assert time.process_time() - started < LINEAR_CPU_S


def test_a_closing_sum_of_quantities_with_units_is_read_in_linear_time() -> None:
    # a parenthetical of operands with units that is no working (text follows it) was
    # tried in 2^n ways, one for each space before a unit: 24 operands took 17 s of CPU,
    # 30 some 18 minutes
    output = "It is 25 m (" + "1 m + " * 24 + "1 m) in all, I think."
    # operands with a few words each ("$1 in tax"): a unit and the words after it could
    # share the words out in two ways per operand
    worded = "It is $25 (" + "$1 in tax plus " * 24 + "$1 tax) and so on, I think."
    started = time.process_time()
    assert graded(number_task("25"), output).score is not None
    assert graded(number_task("25"), worded).score is not None
    assert time.process_time() - started < LINEAR_CPU_S


TO_HOURS = "Convert 150 minutes to hours. Answer with just the number."
TO_MINUTES = "How many minutes are 2 hours and 30 minutes? Answer with just the number."
TRIP = "A trip starts at 9:00 and ends at 11:30. How long does it take?"
BOTH_UNITS = "How many hours and how many minutes are in 150 minutes?"
TO_MINUTES_AND_SECONDS = "Convert 2.5 hours to minutes and seconds."
IN_GRAMS = "A bag holds 2 kg of rice and another 3 kg. How many grams of rice are there?"
TRIP_MINUTES = "How many minutes did the trip take?"
HOW_MANY_MINUTES = "A film lasts from 18:00 to 19:30. How many minutes does it last?"


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        # in the unit the question asks for, a quantity in two units is its value
        (TO_HOURS, "2 hours and 30 minutes", "2.5", 1.0),
        (TO_HOURS, "150 minutes is 2 hours and 30 minutes.", "2.5", 1.0),
        (TO_HOURS, "The answer is 2 hours and 30 minutes.", "2", 0.0),
        (TO_HOURS, "The answer is 2 hours and 30 minutes.", "30", 0.0),
        ("Convert 63 inches to feet.", "63 inches = 5 feet 3 inches", "5.25", 1.0),
        ("Convert 63 inches to feet.", "63 inches = 5 feet 3 inches", "3", 0.0),
        ("Convert 80 minutes to hours.", "1 hour and 20 minutes", "4/3", 1.0),
        # the question's own quantity echoed is no answer; the number after it is
        (TO_MINUTES, "2 hours and 30 minutes is 150 minutes.", "150", 1.0),
        (TO_MINUTES, "2 hours and 30 minutes", "150", 0.0),
        (TO_MINUTES, "2 hours and 30 minutes", "30", 0.0),
        # no unit asked: a quantity in two units is no single number
        (TRIP, "The trip takes 2 hours and 30 minutes.", "30", 0.0),
        (TRIP, "The trip takes 2 hours and 30 minutes.", "2.5", 0.0),
        (TRIP, "It takes 2 hours and 30 minutes, so 150 minutes.", "150", 1.0),
        # two units asked: the quantity in either
        (BOTH_UNITS, "2 hours and 30 minutes", "2.5", 1.0),
        (TO_MINUTES_AND_SECONDS, "150 minutes or 9000 seconds", "150", 1.0),
        (TO_MINUTES_AND_SECONDS, "150 minutes (9000 seconds)", "9000", 1.0),
        (TO_MINUTES_AND_SECONDS, "150 minutes (9500 seconds)", "150", 0.0),  # not one quantity
        # though "or" joins a restatement in another unit, the first read, as after ####:
        # the grader checks no conversion there (read 9500 before)
        (TO_MINUTES_AND_SECONDS, "150 minutes or 9500 seconds", "150", 1.0),
        # one of them asked: the quantity in that one
        ("Convert 2.5 hours to minutes.", "150 minutes (9000 seconds)", "150", 1.0),
        ("Convert 2.5 hours to minutes.", "9000 seconds, i.e. 150 minutes", "150", 1.0),
        ("Convert 2.5 hours to minutes.", "150 minutes (9000 seconds)", "9000", 0.0),
        # a unit abbreviated on either side, markdown, "(or ...)", "(i.e. ...)"
        (IN_GRAMS, "5000 g (5 kg)", "5000", 1.0),
        (IN_GRAMS, "5000 grams (5 kg)", "5000", 1.0),
        (IN_GRAMS, "5 kg (5000 g)", "5000", 1.0),
        (IN_GRAMS, "**5000 grams** (5 kg)", "5000", 1.0),
        (IN_GRAMS, "5000 grams (or 5 kg)", "5000", 1.0),
        (IN_GRAMS, "5000 grams (i.e. 5 kg).", "5000", 1.0),
        (IN_GRAMS, "5000 grams (that is, 5 kilograms)", "5000", 1.0),
        (IN_GRAMS, "5000 g (5 kg)", "5", 0.0),
        (IN_GRAMS, "4000 g (5 kg)", "5000", 0.0),  # not one quantity: the last number
        (IN_GRAMS, "**5000 grams** (4 kg)", "5000", 0.0),
        # said to be the same in another sentence or clause (2.5 hours, the last number, was
        # read)
        (HOW_MANY_MINUTES, "It lasts 150 minutes. That is the same as 2.5 hours.", "150", 1.0),
        (HOW_MANY_MINUTES, "It lasts 150 minutes, the same as 2.5 hours.", "150", 1.0),
        (HOW_MANY_MINUTES, "It lasts 150 minutes, equivalent to 2.5 hours.", "150", 1.0),
        (HOW_MANY_MINUTES, "It lasts 2.5 hours. That is the same as 150 minutes.", "150", 1.0),
        (HOW_MANY_MINUTES, "It lasts 150 minutes. That is 3 hours.", "150", 0.0),
        (
            "How many hours does the film last?",
            "It lasts 2.5 hours. That is 150 minutes.",
            "2.5",
            1.0,
        ),
        # each unit's size
        ("How many days did the trip last?", "It lasted 1 week and 3 days.", "10", 1.0),
        ("How many hours did the job take?", "It took 2 days and 6 hours.", "54", 1.0),
        ("How many feet of rope are left?", "2 yards and 1 foot are left.", "7", 1.0),
        ("How many meters did she run?", "She ran 3 km and 200 m.", "3200", 1.0),
        ("How many centimeters tall is the door?", "The door is 2 m 10 cm tall.", "210", 1.0),
        ("How many ounces does the baby weigh?", "The baby weighs 7 pounds 4 ounces.", "116", 1.0),
        ("How many ounces does the baby weigh?", "The baby weighs 7 lbs 4 oz.", "116", 1.0),
        # three parts, and two in one unit (two quantities, not one: not 45 minutes)
        (
            "How many seconds did the race take?",
            "It took 1 hour, 2 minutes and 30 seconds.",
            "3750",
            1.0,
        ),
        (
            "How long was the second run in minutes?",
            "They took 20 minutes and 25 minutes.",
            "25",
            1.0,
        ),
        # a unit asked after "in", and either of two units asked
        ("What is 150 minutes in hours?", "2 hours and 30 minutes", "2.5", 1.0),
        ("How heavy is the bag, in grams or kilograms?", "5 kg (5000 g)", "5", 1.0),
        # two numbers in one unit are two quantities, not one (120 + 60 minutes)
        (
            "How many minutes are in 2 hours?",
            "The answer is 120 minutes, 60 minutes in each hour.",
            "120",
            1.0,
        ),
        # a conversion rate after the quantity is no answer (60 was read as the last number),
        # unless the question asks for a rate
        (
            "How many minutes are in 2 hours?",
            "There are 120 minutes, 60 minutes in each hour.",
            "120",
            1.0,
        ),
        (
            "How many minutes are in 2 hours?",
            "There are 120 minutes, 60 minutes per hour.",
            "120",
            1.0,
        ),
        (
            "How many apples are there in all?",
            "There are 12 apples, 4 apples in each box.",
            "12",
            1.0,
        ),
        (
            "How many apples does each box hold?",
            "They hold 12 apples, 4 apples in each box.",
            "4",
            1.0,
        ),
        # a part in the smaller unit of a whole larger one or more is no part of one quantity
        # ("2 hours, 60 minutes" was read as 180 minutes)
        (
            "How many minutes are in each hour?",
            "There are 120 minutes in 2 hours, 60 minutes in each hour.",
            "60",
            1.0,
        ),
        (
            "How many minutes are in each hour?",
            "There are 120 minutes in 2 hours and 60 minutes in each hour.",
            "60",
            1.0,
        ),
        # but one joined by "and" is a carry not made: "1 hour and 60 minutes" is 120
        # minutes, not the 60 read as the last number
        (TRIP_MINUTES, "It took 1 hour and 60 minutes.", "60", 0.0),
        (TRIP_MINUTES, "It took 1 hour and 60 minutes.", "120", 1.0),
        (TRIP_MINUTES, "The answer is 2 hours and 90 minutes.", "210", 1.0),
        ("How long did the trip take?", "It took 1 hour and 60 minutes.", "60", 0.0),
        # the answer stated before the question's quantity, joined by a verb (read 3, the
        # question's number, for centimeters, and 300 for meters)
        (CM_IN_METERS, "300 centimeters is 3 meters.", "300", 1.0),
        (CM_IN_METERS, "300 centimeters is 3 meters.", "3", 0.0),
        (CM_IN_METERS, "300 cm equals 3 m.", "300", 1.0),
        (CM_IN_METERS, "So 300 centimeters make 3 meters.", "300", 1.0),
        ("Convert 300 centimeters to meters.", "3 meters is 300 centimeters.", "3", 1.0),
        ("Convert 300 centimeters to meters.", "3 meters are 300 centimeters.", "300", 0.0),
        # not one quantity: the last number, as before
        (CM_IN_METERS, "3 meters is 30 centimeters.", "30", 1.0),
    ],
)
def test_a_quantity_in_two_units_is_read_in_the_unit_asked(
    prompt: str, output: str, answer: str, score: float
) -> None:
    task = Task(id="n", prompt=prompt, answer=answer, grader="number", task="units")
    result = graded(task, output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        # read 5 and 1.5 (the marker's first number), wrong against the grams and minutes asked
        (IN_GRAMS, "The answer is 5 kg (5000 g).", "5000", 1.0),
        (IN_GRAMS, "The answer is 5 kg (5000 g).", "5", 0.0),
        (IN_GRAMS, "**Answer:** 5000 g (5 kg)", "5000", 1.0),
        (HOW_MANY_MINUTES, "The answer is 1.5 hours, or 90 minutes.", "90", 1.0),
        (HOW_MANY_MINUTES, "The answer is 1.5 hours, or 90 minutes.", "1.5", 0.0),
        ("Convert 2.5 hours to minutes.", "Answer: 9000 seconds (150 minutes).", "150", 1.0),
        # not one quantity, or no unit asked: the marker's number, as before
        (IN_GRAMS, "The answer is 4 kg (5000 g).", "5000", 0.0),
        (TRIP, "The answer is 1.5 hours, or 90 minutes.", "1.5", 1.0),
        # two numbers in one unit: the first is the answer, the second no smaller part of it
        (HOW_MANY_MINUTES, "The answer is 90 minutes, 20 minutes more than the news.", "90", 1.0),
    ],
)
def test_a_marked_quantity_in_two_units_is_read_in_the_unit_asked(
    prompt: str, output: str, answer: str, score: float
) -> None:
    task = Task(id="n", prompt=prompt, answer=answer, grader="number", task="units")
    result = graded(task, output)
    assert result.score == score, result.detail


def test_quantities_in_two_units_take_linear_time() -> None:
    task = Task(id="n", prompt=TO_HOURS, answer="2.5", grader="number", task="units")
    started = time.process_time()
    assert graded(task, "2 hours and 30 minutes, " * 15_000).score is not None
    assert graded(task, "2 hours " * 40_000).score is not None
    assert time.process_time() - started < LINEAR_CPU_S


PER_WEEK = "A worker earns $18 a day. How much does she earn per week (7 days)?"
PER_DAY = "A worker earns $126 a week. How much does she earn per day?"
TO_M_PER_S = "Convert 90 kilometers per hour to meters per second."
HOURLY = "What is her hourly wage if she earns $120 in 8 hours?"


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        # one amount at two rates: the rate the question asks for, first or second
        (PER_WEEK, "She earns $126 a week, or $18 a day.", "126", 1.0),
        (PER_WEEK, "The answer is $18 a day, or $126 a week.", "126", 1.0),
        (PER_WEEK, "The answer is $126 a day, or $882 a week.", "126", 0.0),
        (PER_WEEK, "$880 a week, or $126 a day", "126", 0.0),
        (PER_WEEK, "18 dollars daily, so 126 dollars weekly.", "126", 1.0),
        (PER_DAY, "$18 a day, or $126 a week.", "18", 1.0),
        (PER_DAY, "She earns $18 a day, so $126 a week.", "18", 1.0),
        (PER_DAY, "She earns $126 a week, i.e. $20 a day.", "18", 0.0),
        (TO_M_PER_S, "25 m/s = 90 km/h", "25", 1.0),
        (TO_M_PER_S, "90 km/h = 25 m/s", "90", 0.0),
        (HOURLY, "$15 an hour, or $120 a day", "15", 1.0),
        ("How much does he earn annually?", "$60,000 a year, or $5,000 a month.", "60000", 1.0),
        # both rates asked: the usual rules
        ("How much does she earn per day and per week?", "$18 a day, or $126 a week", "126", 1.0),
        # no rate asked: the usual rules
        ("She earns $18 a day. How much in 7 days?", "$18 a day, or $126 a week", "126", 1.0),
    ],
)
def test_an_amount_at_two_rates_is_read_at_the_rate_asked(
    prompt: str, output: str, answer: str, score: float
) -> None:
    task = Task(id="n", prompt=prompt, answer=answer, grader="number", task="rates")
    result = graded(task, output)
    assert result.score == score, result.detail


def test_amounts_at_two_rates_take_linear_time() -> None:
    task = Task(id="n", prompt=PER_WEEK, answer="126", grader="number", task="rates")
    started = time.process_time()
    assert graded(task, "$18 a day, or " * 20_000).score is not None
    assert graded(task, "1," * 100_000 + " a day").score is not None
    assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("output", "answer", "score"),
    [
        ("It's 42, not 32.", "42", 1.0),
        ("It's 42, not 32.", "32", 0.0),
        ("The sum is 42 rather than 32.", "42", 1.0),
        ("I think it's 42, but I'm not 100% sure.", "42", 1.0),
        ("I think it's 42, but I'm not 100% sure.", "100", 0.0),
        ("42\nConfidence: 95%", "42", 1.0),
        ("Not 32.", "32", 0.0),
        ("100% sure: 42", "42", 1.0),
        ("So 42 apples, instead of 32.", "42", 1.0),
        ("So 42 apples. I am 90% certain.", "42", 1.0),
    ],
)
def test_a_ruled_out_number_or_a_confidence_is_not_the_answer(
    output: str, answer: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("output", "answer", "score"),
    [
        ("3 kilograms is equal to 3000 grams because 1 kilogram equals 1000 grams.", "3000", 1.0),
        ("3 kilograms is equal to 3000 grams because 1 kilogram equals 1000 grams.", "1000", 0.0),
        ("2 hours is 7200 seconds, since each hour has 3600 seconds.", "7200", 1.0),
        # a reason that goes on to a result, or one with no number before it
        ("He has 20, since 12 + 8 = 20, and after giving 5 he has 15.", "15", 1.0),
        ("Since each hour has 3600 seconds, 2 hours is 7200 seconds.", "7200", 1.0),
        # a reason in an earlier sentence closes nothing
        ("Ann has 12 apples because she bought 12. Tom has 20 apples.", "20", 1.0),
    ],
)
def test_a_closing_reason_is_not_the_answer(output: str, answer: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("output", "answer", "score"),
    [
        ("68°F (using F = C × 9/5 + 32)", "68", 1.0),
        ("68°F (using F = C × 9/5 + 32)", "32", 0.0),
        ("5 kilometers = 5,000 meters.\n\n(1 kilometer = 1,000 meters)", "5000", 1.0),
        ("The area is 12 (where the width is 3)", "12", 1.0),
    ],
)
def test_a_closing_note_on_the_method_is_not_the_answer(
    output: str, answer: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert result.score == score, result.detail


SHARE = (
    "20 candies are shared equally among 5 children. Each child then eats 2 of them. How many "
    "candies does each child have left? Answer with just the number."
)
WHAT_IS = "What is 9 * 11 + 27? Answer with just the number."
SHARED = "20 candies are shared equally among 5 children. Each child then eats 2 of them."
LONG_SHARE = "".join(f"Box {box} holds {box + 2} pens. " for box in range(1, 21)) + SHARE
BOXES = "Tim buys 12 boxes of 3 pens. How many boxes?"
IN_BOXES = "How many pens are in 12 boxes? Each box holds 3 pens."
KEEPS = "Tom has 5 apples. He gives none away. How many apples does he have left?"


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        # a copy of the question is no answer, though its last number is the reference
        (WHAT_IS, "What is 9 * 11 + 27?", "27", 0.0),
        (SHARE, SHARED, "2", 0.0),
        (SHARE, "Each child gets 4. Each child then eats 2 of them.", "2", 0.0),
        (LONG_SHARE, SHARED, "2", 0.0),  # the last sentences of a long question
        (BOXES, "Tim buys 12 boxes of 3 pens.", "12", 0.0),
        # a copy cut before its period, where the output or its line ends, is one too
        (SHARE, SHARED.removesuffix("."), "2", 0.0),
        (SHARE, "Each child then eats 2 of them \n\n", "2", 0.0),
        (IN_BOXES, "How many pens are in 12 boxes", "12", 0.0),  # before its "?"
        # a part of a sentence of the question answers ("How many boxes?" is asked), as
        # does a copy that goes on
        (BOXES, "Tim buys 12 boxes.", "12", 1.0),
        (KEEPS, "Tom has 5 apples left.", "5", 1.0),
        # the answer after the copy counts
        (WHAT_IS, "What is 9 * 11 + 27? 126", "126", 1.0),
        (SHARE, "Each child then eats 2 of them. So 4 - 2 = 2 are left.", "2", 1.0),
    ],
)
def test_number_grader_does_not_read_a_copy_of_the_question_as_the_answer(
    prompt: str, output: str, answer: str, score: float
) -> None:
    task = Task(id="n", prompt=prompt, answer=answer, grader="number", task="math")
    result = graded(task, output)
    assert result.score == score, result.detail


def test_copies_of_the_question_are_found_in_linear_time() -> None:
    task = Task(id="n", prompt=SHARE, answer="2", grader="number", task="math")
    started = time.process_time()
    assert graded(task, "Each child then eats " * 20_000).score is not None
    assert graded(task, "Each child then eats 2 of them. " * 10_000).score == 0.0
    assert time.process_time() - started < LINEAR_CPU_S


@pytest.mark.parametrize(
    ("output", "answer", "score"),
    [
        ("twenty-six", "26", 1.0),
        ("Twenty six", "26", 1.0),
        ("twenty-six", "6", 0.0),  # not its last word
        ("One hundred twenty-six", "6", 0.0),  # nor a part of a longer number in words
        ("one hundred and five", "5", 0.0),
        ("forty", "40", 1.0),
        ("ninety-nine", "99", 1.0),
    ],
)
def test_number_grader_reads_a_number_in_words_whole(
    output: str, answer: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert result.score == score, result.detail


@pytest.mark.parametrize(
    ("output", "answer", "score"),
    [
        ("The answer is 125. Hmm, actually 126.", "126", 1.0),
        ("The answer is 125. Hmm, actually 126.", "125", 0.0),
        ("The answer is 125. Wait, 126.", "126", 1.0),
        ("The answer is 125. I mean 126.", "126", 1.0),
        ("The answer is 125. Actually, 126 apples.", "126", 1.0),
        ("The answer is 125. Actually no, 126.", "126", 1.0),
        ("125\nActually 126.", "126", 1.0),
        ("The answer is 125. Actually 126.", "125", 0.0),
        # a hesitation or an apology leads a correction, as "A. Hmm, B." does to the choice grader
        ("The answer is 125. Hmm, 126.", "126", 1.0),
        ("The answer is 125. Hmm, 126.", "125", 0.0),
        ("Answer: 125. Hmm... 126 apples.", "126", 1.0),
        ("125\n\nHmm, 126.", "126", 1.0),
        ("The answer is 125. Sorry, 126.", "126", 1.0),
        ("The answer is 125. Hmm, 126 is wrong.", "125", 1.0),
        ("The answer is 125. Hmm, 126? Let me check. Yes, 125.", "125", 1.0),
        ("The answer is 125. Hmm, 126 or 127.", "125", 0.0),
        # no correction: a remark, a question or more than a unit after the number
        ("The answer is 125. Wait, 126 is wrong.", "125", 1.0),
        ("The answer is 125. Wait, 126? No, 125 it is.", "126", 0.0),
        ("The answer is 125. Actually 3 more.", "3", 0.0),
        ("The answer is 20 apples. There are actually 5 boxes.", "5", 0.0),
        ("The answer is 20. I had to wait, 5 minutes passed.", "5", 0.0),
        ("The answer is 125. Actually 126 or 127.", "125", 0.0),
        ("The answer is 125. Actually 126 or 127.", "126", 0.0),
        # numbers after the correction: a check ending on it, or an aside, leave it the answer
        ("The answer is 125. Hmm, actually 126. Check: 5 * 25 + 1 = 126.", "126", 1.0),
        ("The answer is 125. Actually 126. Confidence: 90%.", "126", 1.0),
        # ... another value after it makes it a step of the working
        ("Let's count: 1, 2, 3, 4. Wait, 5 boxes. Each holds 4, so 20 apples.", "5", 0.0),
        ("The answer is 125. Wait, 125 apples. Let me double-check with 5 * 25.", "25", 0.0),
    ],
)
def test_number_grader_reads_a_bare_correction(output: str, answer: str, score: float) -> None:
    assert graded(number_task(answer), output).score == score


@pytest.mark.parametrize(
    ("output", "answer", "score"),
    [
        ("It's 5 kilograms (5000 grams / 1000).", "5", 1.0),
        ("It's 5 kilograms (5000 grams / 1000).", "1000", 0.0),
        ("It's 4 kilograms (5000 grams / 1000).", "5", 0.0),
        ("12 apples (15 apples - 3 apples).", "12", 1.0),
        ("12 apples (15 apples - 3 apples).", "3", 0.0),
        ("It is 12 (3 boxes x 4).", "4", 0.0),
        # degrees, and the working's own parentheses
        ("68 °F (20 °C × 9/5 + 32)", "68", 1.0),
        ("68°F (20°C x 1.8 + 32).", "32", 0.0),
        ("10°C ((50°F - 32) × 5/9)", "10", 1.0),
        ("10°C ((50°F - 32) × 5/9)", "5/9", 0.0),
        ("68°F ((20°C × 9/5) + 32).", "68", 1.0),
        # what is counted, listed
        ("4 times (positions 3, 4, 6, 7)", "4", 1.0),
        ("4 times (positions 3, 4, 6, 7)", "7", 0.0),
        ("It appears 4 times (at 3, 4, 6 and 7).", "4", 1.0),
        ("4 (or 5, 6)", "4", 0.0),  # a hedge, not a list
        # a number in words before the working
        ("She has fourteen apples (12 + 5 - 3).", "14", 1.0),
        ("She has fourteen apples (12 + 5 - 3).", "3", 0.0),
        ("Fifteen (12 + 5 - 3 = 14)", "14", 0.0),
        ("She has some apples (12 + 5 - 3).", "3", 0.0),
    ],
)
def test_working_with_units_in_a_closing_parenthetical_is_not_the_answer(
    output: str, answer: str, score: float
) -> None:
    assert graded(number_task(answer), output).score == score


def test_number_grader_reads_nested_closing_parentheses_in_linear_time() -> None:
    started = time.process_time()
    output = "It is 12 " + "(" * 100_000 + "3 x 4" + ")" * 100_000
    assert graded(number_task("12"), output).score is not None
    assert time.process_time() - started < LINEAR_CPU_S


LARGEST = "What is the largest number in the list [-5, 12, -30, 7, 0]?"
SECOND_LARGEST = "What is the second largest number in the list [12, 45, 7, 33, 90, 21]?"


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        (LARGEST, "The largest is 12, and the smallest is -30.", "12", 1.0),
        (LARGEST, "The largest is 12, and the smallest is -30.", "-30", 0.0),
        (LARGEST, "12 is the largest, -30 is the smallest.", "12", 1.0),
        (LARGEST, "The largest is 7, and the smallest is -30.", "12", 0.0),
        (LARGEST, "The smallest is -30.", "-30", 1.0),  # no largest said: the last number
        (SECOND_LARGEST, "The second largest is 45, the largest is 90.", "45", 1.0),
        (SECOND_LARGEST, "The second largest is 45, the largest is 90.", "90", 0.0),
    ],
)
def test_number_grader_reads_the_number_said_to_be_what_the_question_asks(
    prompt: str, output: str, answer: str, score: float
) -> None:
    result = graded(number_task(answer, prompt), output)
    assert result.score == score, result.detail


def test_number_grader_reads_superlatives_in_linear_time() -> None:
    started = time.process_time()
    output = "the largest is 7 " * 50_000 + "and the smallest is -30."
    assert graded(number_task("12", LARGEST), output).score == 0.0
    assert time.process_time() - started < LINEAR_CPU_S


TOTAL = "A class of students took a test and 12 passed. How many students were there in total?"


@pytest.mark.parametrize(
    ("prompt", "output", "answer", "score"),
    [
        (SHARE, "2 candies left out of 4", "2", 1.0),
        (SHARE, "Each child has 2 candies left out of the 4.", "2", 1.0),
        (SHARE, "2 candies left out of 4", "4", 0.0),
        # unless the question asks for the whole
        ("How many apples does Sam have altogether?", "Sam has 3 red apples out of 8.", "8", 1.0),
        ("How many marbles are there in all?", "4 blue marbles out of 10.", "10", 1.0),
        (SHARE, "Each child has 2 of the 4 candies left.", "2", 1.0),
        (SHARE, "2 of 4 candies are left.", "2", 1.0),
        ("How many eggs did he buy?", "He bought 3 packs for a total of 12 eggs.", "12", 1.0),
        ("What is 25% of 80?", "25% of 80 is 20.", "20", 1.0),
        ("How many apples are left?", "14 apples left out of 17", "14", 1.0),
        ("How many are left?", "Sam has 3 red apples still in his basket out of 8.", "3", 1.0),
        # the whole is the answer when the question asks for it
        (TOTAL, "12 passed out of 30", "30", 1.0),
        ("Out of how many?", "14 out of 17", "17", 1.0),
    ],
)
def test_the_whole_a_number_is_out_of_is_not_the_answer(
    prompt: str, output: str, answer: str, score: float
) -> None:
    result = graded(number_task(answer, prompt), output)
    assert result.score == score, result.detail


DAYS_TO_READ = "Sam reads 5 pages a day. How many days does he need to read a 20-page book?"


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("It takes 4 days.\n\n(Check: 4 days × 5 pages/day = 20 pages.)", 1.0),
        ("He needs 4 days.\n\nCheck: 4 days × 5 pages per day = 20 pages, which matches.", 1.0),
        ("He needs 4 days.\n\nLet me verify: 4 × 5 = 20. ✓", 1.0),
        ("He needs 20 / 5 = 4 days.\n\n**Verification:** 5 × 4 = 20 ✓", 1.0),
        ("He needs 4 days. Let's double-check: 5 + 5 + 5 + 5 = 20.", 1.0),
        ("He reads 5 pages a day for 20 pages. To double-check: 20 / 5 = 4 days.", 1.0),  # no cut
        ("He needs 3 days.\n\nCheck: 3 × 5 = 15. ✓", 0.0),  # a check not back to the question
        ("He needs 3 days.\nCheck: 3 × 5 = 20.", 0.0),  # a wrong answer stays wrong
        ("He needs 3 days.\nCheck: 3 × 5 = 15, but we need 20, so 4 days.", 1.0),
        ("He needs 4 days.\nCheck: 4 × 5 = 20, but that's only 20. So 5 days.", 0.0),
    ],
)
def test_a_check_after_the_answer_that_works_back_to_the_question_is_no_answer(
    output: str, score: float
) -> None:
    result = graded(number_task("4", DAYS_TO_READ), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("4", r"The area is $\boxed{3 \cdot 4}$.", 0.0),  # read 4
        ("12", r"The area is $\boxed{3 \cdot 4}$.", 0.0),  # the grader does not compute it
        ("4", r"\boxed{3 \times 4}", 0.0),
        ("4", r"\boxed{3 + 4}", 0.0),
        ("3", r"\boxed{12 \div 3}", 0.0),  # read 3 ("\div" blanked)
        ("12", r"\boxed{3 \cdot 4 = 12}", 1.0),  # its value given counts
        ("1500000", r"\boxed{1.5 \cdot 10^{6}}", 1.0),  # a power of ten is no operation
        ("20", "#### 20 + 3", 0.0),  # read 20, its first operand
        ("23", "#### 20 + 3", 0.0),  # the grader does not compute it
        ("20", "#### 20 plus 3", 0.0),
        ("12", "#### 12 ÷ 4", 0.0),
        ("3", "#### 12 ÷ 4", 0.0),  # "÷" divides, it writes no fraction (as "12 / 4" does)
        ("23", "#### 23", 1.0),
        ("23", "#### 23\nThat is 20 + 3.", 1.0),  # the working on a later line
        ("23", "#### 20 + 3 = 23", 1.0),  # its result given counts (read 20)
        ("24", "#### 20 + 3 = 24", 1.0),  # read as given, as in \boxed{20 + 3 = 24}
        # a chain's side after its "=" counts (read as an expression before)
        ("27", "#### 20 + 3 + 4 = 27", 1.0),
        ("14", "#### 2 + 3 * 4 = 14", 1.0),  # times before plus
        ("24", "#### 2 times 3 times 4 = 24 pens", 1.0),
        # the side after the last '=' is the answer given, as "#### 20 + 3 = 24" reads 24
        # (no answer before): the grader checks no step
        ("28", "#### 20 + 3 + 4 = 28", 1.0),
        ("20", "#### 2 + 3 * 4 = 20", 1.0),
        ("21", "#### 20 + 3 = 23 - 2 = 21", 1.0),  # read 23, a step
        ("21", "#### 20 + 3 = 23 - 2", 0.0),  # its last side is an operation not done
        ("8", "#### 20 - 3 * 4 = 8", 1.0),  # a '-' before an '=' subtracts, no range
        ("17", "#### 20 - 3 = 17", 1.0),
        ("4", "#### 12 ÷ 4 + 1 = 4", 1.0),
        ("13", "#### 20 minus 3 minus 4 = 13", 1.0),
        ("12", "#### 3 multiplied by 4 = 12", 1.0),
        ("12", "#### 3 ⋅ 4 = 12", 1.0),  # the dot operator
        ("12", "#### 3 Times 4 = 12", 1.0),
        ("23", "#### 20, plus 3 = 23", 1.0),
        # an '=' inside words after the last side ends the chain: no step of it (read 6)
        ("12", "#### 2 * 6 = 12 cookies (each box = 6)", 1.0),
        ("27", "#### 20 + 3 x 4 = 27", 0.0),  # "x" joins no chain: "a 20 x 30 room"
        # a unit word after an operand keeps the chain (an expression, read 20, before)
        ("23", "#### 20 + 3 apples = 23", 1.0),
        ("23", "#### 20 apples + 3 apples = 23 apples", 1.0),
        ("17", "#### 20 apples - 3 apples = 17", 1.0),
        ("23", "#### 20km + 3km = 23km", 1.0),
        ("6", "#### 2 boxes times 3 = 6", 1.0),
        ("23", "#### 20 + 3 x = 23", 0.0),  # a variable, "3x = 23", is no unit
        # nor is a constant's name: "3 pi" is "3π", which the grader does not compute (read
        # 11.42 before, as if "pi" were a unit)
        ("11.42", "#### 2 + 3 pi = 11.42", 0.0),
        ("11.42", "#### 2 + 3 Pi = 11.42", 0.0),
        ("11.42", "#### 2 + 3π = 11.42", 0.0),
        ("5", "#### 2 + 3 pies = 5", 1.0),
        # its result before the operation counts when the operation gives it
        ("12", r"\boxed{12 = 3 \cdot 4}", 1.0),
        ("12", r"\boxed{x = 12 = 3 \times 4}", 1.0),
        ("7", r"\boxed{7 = 3 + 4}", 1.0),
        ("4", r"\boxed{4 = 12 \div 3}", 1.0),
        ("8", r"\boxed{8 = 12 \text{ minus } 4}", 1.0),
        ("8", r"\boxed{8 = 12 - 4}", 1.0),  # a '-' after an '=' subtracts (read a range)
        ("7", r"\boxed{7 = 3 \text{ plus } 4}", 1.0),
        ("16", r"\boxed{16 = 12 \text{ minus } 4}", 0.0),  # it subtracts
        ("12", r"\boxed{12 = 3 + 4}", 0.0),  # a false equation: 7 or 12?
        ("12", r"\boxed{5 + 12 = 3 \cdot 4}", 0.0),  # 12 is no side of it
        ("0", r"\boxed{0 = 5 \div 0}", 0.0),
        # after #### too, as "The answer is 12 = 3 + 4." scores 0 (each read its first
        # number before: no step after its '=' was checked)
        ("12", "#### 12 = 3 * 4", 1.0),
        ("8", "#### 8 = 12 minus 4", 1.0),
        ("8", "#### 8 = 12 - 4", 1.0),  # a '-' after an '=' subtracts, no range
        ("9", "#### 9 = 12 minus 4", 0.0),
        ("12", "#### 12 = 12 + 1", 0.0),
        ("12", "#### 12 = 3 * 4 + 1", 0.0),  # the operation goes on
        ("12", "#### 12 = 3 * 4\n3 rows of 4 apples.", 1.0),  # the working on a later line
        ("8", "#### 9 = 12 - 4 = 8", 1.0),  # its side after the last '=', no step checked
        # a chain of operations before the '=' gives it too, '*' and '/' before '+' and '-'
        # (an expression before: one operation only was computed)
        ("12", "#### 12 = 2 * 3 * 2", 1.0),
        ("12", r"\boxed{12 = 2 \cdot 3 \cdot 2}", 1.0),
        ("14", "#### 14 = 2 + 3 * 4", 1.0),
        ("14", r"\boxed{14 = 2 + 3 \times 4}", 1.0),
        ("4", "#### 4 = 20 - 12 ÷ 3 - 12", 1.0),
        ("3", "#### 3 = 48 ÷ 4 ÷ 4", 1.0),
        ("12", "#### 12 = 2 * 3 * 3", 0.0),  # 18: a false equation
        ("12", r"\boxed{12 = 2 \cdot 3 \cdot 3}", 0.0),
        ("12", r"\boxed{3 + 9 = 12 = 2 \cdot 3 \cdot 2}", 1.0),  # the side before its last '='
        ("12", "#### 12 = 2 * 3 * 2 = 6 + 6", 0.0),  # an '=' after the operations
        ("20", "#### 20 = 2 + 3 * 4", 0.0),  # 14, not (2 + 3) * 4
        ("0", "#### 0 = 2 * 3 ÷ 0", 0.0),
        # operations in words mixing '+' or '-' with '*' or '/' are unsure: spoken, "2 plus
        # 3 times 4" may mean 20
        ("14", "#### 14 = 2 plus 3 times 4", 0.0),
        ("20", "#### 20 = 2 plus 3 times 4", 0.0),
        ("9", "#### 9 = 2 plus 3 plus 4", 1.0),
        ("11", "#### 11 = 10 minus 2 plus 3", 1.0),  # '+' and '-' are one kind
        ("12", r"\boxed{12=2 \cdot 3 \cdot 2}", 1.0),  # no space before the '='
    ],
)
def test_an_operation_not_done_in_a_box_or_after_hashes_is_no_answer(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail
    if score == 0.0:
        assert "an expression" in result.detail


@pytest.mark.parametrize(
    ("output", "shown"),
    [
        (r"\boxed{9 = 12 - 4}", "'12 - 4' in \\boxed{}"),
        (r"\boxed{8 = 5-7}", "'5-7' in \\boxed{}"),
        ("The answer is 9 = 12 - 4.", "'12 - 4'"),
        ("The answer is 8 = 12 - 4 - 1.", "'12 - 4 - 1'"),
        ("#### 9 = 12 - 4", "'9 = 12 - 4' after ####"),
    ],
)
def test_a_false_equation_with_a_minus_is_an_expression_not_a_range(
    output: str, shown: str
) -> None:
    # a '-' after an '=' subtracts ("8 = 12 - 4" answers 8): no "12 - 4" range (said before)
    result = graded(number_task("8"), output)
    assert (result.score, result.error) == (0.0, None)
    assert f"the answer is an expression, not a number: {shown}" in result.detail


def test_the_detail_says_a_chain_after_hashes_gave_its_last_side() -> None:
    chain = graded(number_task("23"), "#### 20 + 3 = 23")
    assert "(after #### and its last '=')" in chain.detail
    assert "(after ####)" in graded(number_task("23"), "#### 23").detail
    assert "(after ####)" in graded(number_task("120"), "#### 120 = 2 hours").detail


def test_the_detail_shows_the_whole_chain_after_hashes_that_is_no_answer() -> None:
    goes_on = graded(number_task("12"), "#### 12 = 3 * 4 + 1").detail
    assert "'12 = 3 * 4 + 1' after ####" in goes_on
    assert "'12 = 3 + 4' after ####" in graded(number_task("12"), "#### 12 = 3 + 4").detail
    chain = graded(number_task("12"), "#### 12 = 2 * 3 * 3 apples, in 5 rows").detail
    assert "'12 = 2 * 3 * 3' after ####" in chain  # the chain of operations, not what follows


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("5", r"The number of arrangements is $\boxed{5!}$.", 0.0),  # 120, not 5
        ("3", r"\boxed{(1+2)!}", 0.0),
        ("120", r"\boxed{5!}", 0.0),  # the grader does not compute it
        ("120", r"\boxed{5! = 120}", 1.0),  # its value given counts
        ("10000", r"\boxed{10,\!000}", 1.0),  # LaTeX spacing, no factorial
        ("5", "The answer is 5!", 1.0),  # an exclamation outside math
    ],
)
def test_a_factorial_in_a_box_is_not_its_operand(answer: str, output: str, score: float) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("5", "The rod is 5 cm ± 0.1 cm.", 1.0),
        ("5", "5 +/- 0.5", 1.0),
        ("5", r"\boxed{5 \pm 0.1}", 1.0),
        ("0.1", "The rod is 5 cm ± 0.1 cm.", 0.0),  # the tolerance is no answer
        ("4", "5 +/- 0.5", 0.0),
    ],
)
def test_a_measurement_is_read_without_its_tolerance(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer, "How long is the rod?"), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("12", "The answer is 12. If instead there were 5 boxes, the answer would be 20.", 1.0),
        ("20", "The answer is 12. If instead there were 5 boxes, the answer would be 20.", 0.0),
        ("12", "The answer is 12.\n\nNote: if each box held 5, the answer would be 15.", 1.0),
        ("15", "So the answer is 15. Otherwise, the answer would be 20.", 1.0),
        ("12", "The answer is 12. Suppose there were 5 boxes; the answer would be 20.", 1.0),
        # no condition before it, or no answer before it: still the answer
        ("12", "He had 12 apples, so the answer would be 12.", 1.0),
        ("12", "If we add 5 and 7, the answer would be 12.", 1.0),
        ("14", "The answer is 12. So the answer would be 14.", 1.0),
    ],
)
def test_a_what_if_after_the_answer_is_not_the_answer(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("4", "There are 4 ways: (1,2), (2,1), (3,0), (0,3).", 1.0),
        ("3", "There are 4 ways: (1,2), (2,1), (3,0), (0,3).", 0.0),  # read 3 before
        ("3", "The 3 solutions are: (1, 2, 3), (2, 3, 1) and (3, 1, 2).", 1.0),
        ("2", "So there are **2** ordered pairs: (1, 4) and (4, 1).", 1.0),
        ("1", "There is 1 point: (1, 5).", 1.0),
        # a count that is not the number of pairs listed is no answer by this rule
        ("4", "There are 4 ways: (1,2), (2,1), (3,0).", 0.0),
        ("12", "The answer is 12.\n\nThe 2 pairs: (1, 4) and (4, 1).", 1.0),  # a marker first
    ],
)
def test_a_count_followed_by_the_pairs_it_counts_answers_the_count(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("5", "He had 3 apples and got 2 more. The answer is five.", 1.0),
        ("2", "He had 3 apples and got 2 more. The answer is five.", 0.0),  # read 2 before
        ("5", "He had 3 apples and got 2 more.\n\n**Final answer:** Five apples", 1.0),
        ("5", "He had 3 apples and got 2 more.\n\nAnswer:\n\nfive", 1.0),
        ("20", "He had 3 apples. The answer is twenty.", 1.0),
        # a part of a longer number in words is not read: no answer, not the 3 before
        ("3", "3 boxes. The answer is one hundred twenty-five.", 0.0),
        # a word that is no number given as the answer: the usual rules
        ("3", "He had 3 apples. The answer is one of them.", 1.0),
        # and before a parenthesis showing the working (was "an expression: '3 + 2'")
        ("5", "The answer is five (3 + 2).", 1.0),
        ("5", "The answer is **five** apples (3 + 2).", 1.0),
        ("3", "The answer is five (3 + 2).", 0.0),
        ("100", "The answer is one hundred (100).", 1.0),
        # an operand in words: not the answer 3 (read 3 before)
        ("3", "The answer is one more than 3, so 4.", 0.0),
        ("4", "The answer is one more than 3, so 4.", 1.0),
        ("3", "The answer is two times 3.", 0.0),
    ],
)
def test_a_number_in_words_after_an_answer_marker_is_the_answer(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("42", '{"answer": 42, "explanation": "There are 6 rows of 7 seats."}', 1.0),
        ("42", '```json\n{\n  "answer": 42,\n  "explanation": "6 rows of 7 seats"\n}\n```', 1.0),
        ("42", "{'answer': '42', 'reasoning': '6 rows of 7 seats'}", 1.0),
        ("7", '{"answer": 42, "explanation": "There are 6 rows of 7 seats."}', 0.0),
    ],
)
def test_the_answer_key_of_a_json_reply_is_the_answer(
    answer: str, output: str, score: float
) -> None:
    """A reply asked for JSON gives its number under "answer"; the explanation after it was
    read for the last number instead (was '6' and 0 for 42)."""
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("12.57", "The area is about 12.566, i.e. 12.57 (to 2 decimal places).", 1.0),
        ("12.57", "The area is 12.57, rounded to 2 decimal places.", 1.0),
        ("12.57", "Area = π × 2² ≈ 12.566 → **12.57** (to 2 d.p.)", 1.0),
        ("4570", "That gives 4571, or 4570 to 3 s.f.", 1.0),
        ("0.00457", "The concentration is 0.00457 mol/L (rounded to 3 sig figs).", 1.0),
        ("2", "The area is 12.57, rounded to 2 decimal places.", 0.0),
        # the number of places itself, when it is what is said
        ("2", "It is given to 2 decimal places.", 1.0),
    ],
)
def test_the_precision_an_answer_is_rounded_to_is_no_answer(
    answer: str, output: str, score: float
) -> None:
    """A closing precision, "12.57 (to 2 decimal places)", was read as the last number (was
    '2', and 0 for 12.57); it is an aside, like a confidence."""
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "prompt", "output", "score"),
    [
        ("25", "What percentage of 80 is 20?", "20 is 25% of 80.", 1.0),
        ("25", "What percent of 80 is 20?", "Since 20/80 = 0.25, 20 is **25%** of the 80.", 1.0),
        ("80", "What percentage of 80 is 20?", "20 is 25% of 80.", 0.0),
        # the whole is the answer when the question asks for it, not a percentage
        ("40", "30% of what number is 12?", "12 is 30% of 40.", 1.0),
    ],
)
def test_what_a_percentage_is_of_is_no_answer_when_the_percentage_is_asked(
    answer: str, prompt: str, output: str, score: float
) -> None:
    """For "What percentage of 80 is 20?", "20 is 25% of 80." answered 80, the last number
    (0 for 25, 1 for 80): what a percentage is of is left out when a percentage is asked."""
    result = graded(number_task(answer, prompt), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    ("answer", "output", "score"),
    [
        ("12", "12 (answered by GPT-4o)", 1.0),  # read 4, the model's name
        ("4", "12 (answered by GPT-4o)", 0.0),
        ("12", "12, says Llama-3", 1.0),  # read 3
        ("12", "It took 12 days to recover from COVID-19", 1.0),
        ("12", "12 (GPT4)", 1.0),
        ("1", "She has 5 - 4 = 1 apple left", 1.0),  # a digit before the hyphen: arithmetic
    ],
)
def test_a_digit_glued_to_a_name_by_a_hyphen_is_not_the_answer(
    answer: str, output: str, score: float
) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (score, None), result.detail


@pytest.mark.parametrize(
    "output",
    [
        # (all read 5 before)
        "#### 5 / 0 = 5",
        "#### 10 / 0 + 5 = 5",
        "#### 5/0",
        "#### 0^-1 or 5",
        # one joined to the answer as a second answer would be, as in "#### 5 or 6"
        "#### 5 or 1/0",
        "#### 5 apples or 1/0",
        "#### 5 (or 1/0)",
        "#### 5 = 5 or 1/0",
    ],
)
def test_a_division_by_zero_after_hashes_is_no_answer(output: str) -> None:
    result = graded(number_task("5"), output)
    assert (result.score, result.error) == (0.0, None), result.detail
    assert "not a number" in result.detail


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        # an equation whose operations divide by zero does not hold: no side of it is the
        # answer, in a box, after #### or after "answer is" (read 1, 3, 5 or 5 before)
        ("5", r"\boxed{5 = 10 / 0 + 1}"),
        ("1", r"\boxed{5 = 10 / 0 + 1}"),
        ("5", r"\boxed{5 = 10 / 0}"),
        ("5", r"\boxed{5 = \frac{10}{0}}"),
        ("5", r"\boxed{5 / 0 = 5}"),
        ("5", "#### 5 = 10 / 0"),
        ("5", "#### 5 = 10 / 0 + 1"),
        ("5", "#### 5 apples = 10 / 0"),
        ("5", "The answer is 5 = 1 / 0 + 3."),
        ("3", "The answer is 5 = 1 / 0 + 3."),
        ("5", "The answer is 5 = 1 / 0."),
        ("3", "The answer is 5 / 0 = 3."),
        ("3", "The answer is clearly 5 = 1 / 0 + 3."),
        ("3", "The answer is x = 5 = 1 / 0 + 3."),
        # a first number the window of MAX_CHARS_BEFORE_THE_CHAIN ends inside is read whole
        ("50", "The answer is " + "very " * 7 + "so, 50 = 100 / 0."),
        # a box holding only a division by zero gives no answer either (read 5 before)
        ("5", r"I had 5. \boxed{1/0}"),
    ],
)
def test_an_equation_dividing_by_zero_is_no_answer(answer: str, output: str) -> None:
    result = graded(number_task(answer), output)
    assert (result.score, result.error) == (0.0, None), result.detail
    assert "not a number (a division by zero)" in result.detail
