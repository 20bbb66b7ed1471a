"""Regenerate examples/corpus/annual_report.pdf, the sample PDF of the corpus.

The report is fictional text written for the cograg project (CC0-1.0). It has
three pages with distinct content: an overview, the finances and the outlook.
Only the built-in Helvetica font is used, so all text must be Latin-1.

Usage (fpdf2 is not a dependency of cograg; install it in a throwaway venv):

    python3 -m venv /tmp/pdfvenv
    /tmp/pdfvenv/bin/pip install fpdf2==2.8.9
    /tmp/pdfvenv/bin/python examples/make_sample_pdf.py
"""

from datetime import datetime, timezone
from pathlib import Path

from fpdf import FPDF

OUTPUT = Path(__file__).resolve().parent / "corpus" / "annual_report.pdf"
# Fixed date so that regenerating the file gives the same metadata.
CREATION_DATE = datetime(2024, 4, 15, tzinfo=timezone.utc)

PAGES = [
    (
        "1. Overview of the Year",
        [
            "The Lindenport Transit Authority (LTA) operates the tram network of "
            "the city of Lindenport on behalf of the city council. This report "
            "covers the financial year from 1 January to 31 December 2023.",
            "In 2023 the network carried 31.2 million passenger trips, an "
            "increase of 6.5 percent compared with 29.3 million trips in 2022. "
            "Line 1 (Red, the Harbour Line) remained the busiest line with 11.6 "
            "million trips, followed by Line 2 (Green) with 8.3 million.",
            "Punctuality reached 94.1 percent of departures within two minutes "
            "of the timetable. In the annual passenger survey, customer "
            "satisfaction was rated 8.1 out of 10. At the end of the year the "
            "LTA employed 612 people and operated 46 Linden L7 trams on four "
            "lines with a route length of 38.4 km.",
            "Chief Executive Marta Ekholm said: 'Lindenport has rediscovered the "
            "tram. Every year since the Tram Renaissance began, more residents "
            "have chosen to leave the car at home.'",
        ],
        [],
    ),
    (
        "2. Finances",
        [
            "The LTA closed 2023 with a small operating surplus of EUR 0.8 "
            "million. Total revenue was EUR 58.7 million and total operating "
            "expenditure was EUR 57.9 million. Average fare revenue per trip was "
            "EUR 1.26.",
        ],
        [
            ("Revenue 2023", "EUR million"),
            ("Fare revenue", "39.2"),
            ("City council subsidy", "15.8"),
            ("Advertising and other income", "3.7"),
            ("Total revenue", "58.7"),
            ("", ""),
            ("Expenditure 2023", "EUR million"),
            ("Staff costs", "31.4"),
            ("Vehicle and track maintenance", "11.2"),
            ("Traction energy", "8.6"),
            ("Administration", "6.7"),
            ("Total expenditure", "57.9"),
        ],
    ),
    (
        "3. Outlook 2024-2027",
        [
            "Line 5 (Purple): the planned fifth line will run from Central "
            "Station to Lindenport Airport. It will be 7.8 km long with 11 stops "
            "and is estimated to cost EUR 146 million. Construction is "
            "scheduled to start in 2025, with opening planned for 2027.",
            "Fleet: in 2023 the LTA invested EUR 12.5 million in capital "
            "projects, mainly the order of 6 additional Linden L7 trams. They "
            "will be delivered in 2024 and 2025 and will raise the fleet to 52 "
            "trams.",
            "Fares: the city council has agreed a fare freeze, so all ticket "
            "prices stay unchanged until 31 December 2024.",
            "Energy: from 1 January 2024 all traction power is bought under a "
            "contract for 100 percent renewable electricity.",
            "Targets for 2024: 33 million passenger trips and a punctuality "
            "rate of 95 percent.",
        ],
        [],
    ),
]


class ReportPDF(FPDF):
    """FPDF with a running header and a page-number footer."""

    def header(self):
        self.set_font("Helvetica", "B", 10)
        self.cell(0, 8, "Lindenport Transit Authority - Annual Report 2023",
                  new_x="LMARGIN", new_y="NEXT")
        self.ln(4)

    def footer(self):
        self.set_y(-15)
        self.set_font("Helvetica", "", 9)
        self.cell(0, 10, f"Page {self.page_no()} of 3", align="C")


def build(path: Path = OUTPUT) -> Path:
    """Write the three-page report to path and return it."""
    pdf = ReportPDF(format="A4")
    pdf.set_title("Lindenport Transit Authority - Annual Report 2023")
    pdf.set_author("Lindenport Transit Authority (fictional, cograg sample)")
    pdf.set_creation_date(CREATION_DATE)
    pdf.set_auto_page_break(auto=True, margin=20)
    for title, paragraphs, table in PAGES:
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 16)
        pdf.cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
        pdf.set_font("Helvetica", "", 11)
        for text in paragraphs:
            pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(3)
        for label, value in table:
            bold = label.startswith(("Total", "Revenue", "Expenditure"))
            pdf.set_font("Helvetica", "B" if bold else "", 11)
            pdf.cell(110, 7, label)
            pdf.cell(40, 7, value, align="R", new_x="LMARGIN", new_y="NEXT")
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


if __name__ == "__main__":
    print(build())
