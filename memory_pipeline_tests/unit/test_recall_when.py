"""The times a query names, which memory_search ranks first: dates that say their year, in English
and Chinese forms, each with a day of slack on both sides (the asker's zone is not the store's)."""

from datetime import date

from memory_pipeline.recall.when import named_periods


def days(query: str) -> list[tuple[str, str]]:
    return [(a.isoformat(), b.isoformat()) for a, b in named_periods(query)]


def test_a_named_day_reaches_one_day_further_on_both_sides():
    assert days("What exciting news did Maria share on 16 June, 2023?") == [("2023-06-15", "2023-06-17")]
    assert days("accepted on May 23, 2023?") == days("on 23rd of May 2023") == [("2023-05-22", "2023-05-24")]
    assert days("on 1 January, 2023") == [("2022-12-31", "2023-01-02")]  # across a year
    assert days("2023-05-01") == days("2023年5月1日") == days("2023年5月1号") == [("2023-04-30", "2023-05-02")]


def test_a_named_month_or_year_is_all_its_days():
    assert days("Who was the new addition to Nate's family in May 2022?") == [("2022-04-30", "2022-06-01")]
    assert days("2024年2月") == [("2024-01-31", "2024-03-01")]  # a leap February
    assert days("How many times has Melanie gone to the beach in 2023?") == [("2022-12-31", "2024-01-01")]
    assert days("我2023年去了三次") == [("2022-12-31", "2024-01-01")]


def test_a_day_without_its_year_takes_the_querys_one_year():
    assert days("Where was John between August 11 and August 15 2023?") == [
        ("2023-08-10", "2023-08-12"),
        ("2023-08-14", "2023-08-16"),
    ]
    assert days("August 11 2022 or August 15 2023") == [("2022-08-10", "2022-08-12"), ("2023-08-14", "2023-08-16")]


def test_words_that_are_not_dates_name_no_time():
    assert days("When did Melanie go camping in June?") == []  # which June: not said
    assert days("You may 5 times ask; we march 3 miles") == []  # no year: words, not dates
    assert days("She scored 2023 points on 31 June") == []  # no such day, and no month with a year
    assert days("What did Mel paint?") == []
    assert named_periods("on 16 June, 2023 and again on 16 June 2023") == [(date(2023, 6, 15), date(2023, 6, 17))]
