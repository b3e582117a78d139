"""Small Word, PowerPoint and Excel documents made with python-docx, python-pptx, openpyxl."""

from __future__ import annotations

import io


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Annual Report", level=0)  # the "Title" style
    document.add_heading("Introduction", level=1)
    document.add_paragraph("This report covers the fiscal year. Revenue grew strongly.")
    document.add_heading("Background", level=2)
    document.add_paragraph("The company was founded in 1999 in Helsinki.")
    document.add_heading("Results", level=1)
    document.add_paragraph("Sales by region are shown below.")
    table = document.add_table(rows=3, cols=2)
    for row, cells in enumerate([("Region", "Sales"), ("North", "120"), ("South", "95")]):
        for column, text in enumerate(cells):
            table.cell(row, column).text = text
    document.add_paragraph("First bullet point", style="List Bullet")
    section = document.sections[0]
    section.header.paragraphs[0].text = "Confidential header"
    section.footer.paragraphs[0].text = "Page footer text"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


SLIDES = [
    ("Quarterly Review", ["Revenue up 12%", "Costs flat"]),
    ("Roadmap", ["Launch in May", "Hire two engineers"]),
    ("Risks", ["Supply chain delays", "Currency exposure"]),
]


def make_pptx() -> bytes:
    from pptx import Presentation

    presentation = Presentation()
    for number, (title, bullets) in enumerate(SLIDES, start=1):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])  # title, content
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = bullets[0]
        for bullet in bullets[1:]:
            paragraph = body.add_paragraph()
            paragraph.text = bullet
            paragraph.level = 1
        slide.notes_slide.notes_text_frame.text = f"Speaker notes for slide {number}"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def make_xlsx() -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    budget = workbook.active
    budget.title = "Budget"
    for row in (["Item", "Cost"], ["Servers", 1200], ["Licences", 300]):
        budget.append(row)
    staff = workbook.create_sheet("Staff")
    for row in (["Name", "Role"], ["Aino", "Engineer"], ["Mikko", "Designer"]):
        staff.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


MAKERS = {"docx": make_docx, "pptx": make_pptx, "xlsx": make_xlsx}
