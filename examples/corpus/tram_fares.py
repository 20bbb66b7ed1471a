"""Fare calculation for the Lindenport tram network.

This module implements the published fare rules of the Lindenport Transit
Authority (LTA):

* Single tickets are priced by the number of fare zones a journey touches:
  1 zone costs EUR 1.80, 2 zones EUR 2.60 and 3 zones EUR 3.20.
* Children under 6 travel free; children aged 6-14 pay 50%, students with a
  LinCard student profile get 25% off and seniors aged 65+ get 40% off.
* Single fares paid with a LinCard on weekdays between 09:30 and 15:30 get a
  10% off-peak discount. It never combines with a concession discount: the
  larger of the two discounts applies.
* Discounted fares are rounded to the nearest 5 cents.
* LinCard single fares are capped per service day at the day-pass price
  (EUR 6.50).
"""

from dataclasses import dataclass, field
from datetime import datetime, time
from decimal import ROUND_HALF_UP, Decimal

SINGLE_FARES = {1: Decimal("1.80"), 2: Decimal("2.60"), 3: Decimal("3.20")}
DAY_PASS = Decimal("6.50")
OFF_PEAK_DISCOUNT = Decimal("0.10")
OFF_PEAK_START = time(9, 30)
OFF_PEAK_END = time(15, 30)
ZONE_ORDER = "ABC"


@dataclass(frozen=True)
class Passenger:
    """A traveller, described by age and whether they hold a student profile."""

    age: int
    student: bool = False
    has_lincard: bool = True


@dataclass
class LinCardDay:
    """Running total of single fares charged to one LinCard in one service day.

    The total never exceeds the price of a day pass (EUR 6.50).
    """

    charged: Decimal = field(default=Decimal("0.00"))

    def charge(self, fare: Decimal) -> Decimal:
        """Charge a fare, applying the daily cap, and return the amount taken."""
        amount = min(fare, DAY_PASS - self.charged)
        amount = max(amount, Decimal("0.00"))
        self.charged += amount
        return amount


def zones_touched(origin_zone: str, destination_zone: str) -> int:
    """Return how many fare zones a journey between two zones touches.

    Zones are nested rings A (centre), B (inner suburbs) and C (outer
    suburbs), so a trip from A to C also passes through B.
    """
    start = ZONE_ORDER.index(origin_zone.upper())
    end = ZONE_ORDER.index(destination_zone.upper())
    return abs(end - start) + 1


def concession_discount(passenger: Passenger) -> Decimal:
    """Return the concession discount (0 to 1) a passenger is entitled to."""
    if passenger.age < 6:
        return Decimal("1.00")
    if passenger.age <= 14:
        return Decimal("0.50")
    if passenger.age >= 65:
        return Decimal("0.40")
    if passenger.student:
        return Decimal("0.25")
    return Decimal("0.00")


def is_off_peak(moment: datetime) -> bool:
    """Tell whether a boarding time falls in the weekday off-peak window."""
    if moment.weekday() >= 5:
        return False
    return OFF_PEAK_START <= moment.time() < OFF_PEAK_END


def round_to_5_cents(amount: Decimal) -> Decimal:
    """Round an amount in euros to the nearest 5 cents (halves round up)."""
    twentieths = (amount * 20).quantize(Decimal("1"), rounding=ROUND_HALF_UP)
    return (twentieths / 20).quantize(Decimal("0.01"))


def single_fare(passenger: Passenger, origin_zone: str,
                destination_zone: str, boarded_at: datetime) -> Decimal:
    """Return the price of a single ticket for one passenger and journey.

    >>> from datetime import datetime
    >>> adult = Passenger(age=30)
    >>> str(single_fare(adult, "A", "B", datetime(2024, 3, 4, 8, 0)))
    '2.60'
    >>> str(single_fare(Passenger(age=70), "A", "B", datetime(2024, 3, 4, 8, 0)))
    '1.55'
    """
    base = SINGLE_FARES[zones_touched(origin_zone, destination_zone)]
    discount = concession_discount(passenger)
    if passenger.has_lincard and is_off_peak(boarded_at):
        discount = max(discount, OFF_PEAK_DISCOUNT)
    return round_to_5_cents(base * (1 - discount))


if __name__ == "__main__":
    day = LinCardDay()
    rider = Passenger(age=40)
    trips = [("A", "C", datetime(2024, 3, 4, 7, 45)),
             ("C", "A", datetime(2024, 3, 4, 12, 10)),
             ("A", "B", datetime(2024, 3, 4, 18, 30))]
    for origin, destination, when in trips:
        fare = single_fare(rider, origin, destination, when)
        taken = day.charge(fare)
        print(f"{origin}->{destination} at {when:%H:%M}: fare {fare}, charged {taken}")
    print(f"Total for the day: {day.charged} (cap {DAY_PASS})")
