"""LICENSE and CITATION.cff: the license pyproject.toml names, in full, and a CFF 1.2.0 citation of the project
and of the papers whose methods it implements (issue 53, item 9)."""
import tomllib

import yaml

from helpers import REPO

# the papers whose methods the project implements: (first author's family name, year, a word of the title)
PAPERS = [("Voita", 2019, "Multi-Head Self-Attention"), ("Clark", 2019, "What Does BERT Look at"),
          ("Michel", 2019, "Sixteen Heads"), ("He", 2021, "Stem Cell Hypothesis"), ("Louizos", 2018, "L0"),
          ("Dozat", 2017, "Biaffine"), ("Zhang", 2020, "CRF Constituency"), ("He", 2018, "Semantic Role Labeling")]


def test_license_is_the_apache_text_pyproject_names():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


def test_citation_cff_cites_the_project_and_its_papers():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert {"message", "title", "authors", "version", "license", "references"} <= set(cff)
    assert str(cff["version"]) == project["version"] and cff["license"] == project["license"]["text"]
    assert cff["authors"] and all("name" in a or "family-names" in a for a in cff["authors"])
    for reference in cff["references"]:  # what CFF 1.2.0 requires of a reference, and what a reader needs
        assert {"type", "title", "authors", "year"} <= set(reference), reference.get("title")
        assert all({"family-names", "given-names"} <= set(a) for a in reference["authors"]), reference["title"]
        assert "doi" in reference or "url" in reference, reference["title"]
    cited = {(r["authors"][0]["family-names"], r["year"], r["title"]) for r in cff["references"]}
    for family, year, word in PAPERS:
        assert any(f == family and y == year and word.lower() in t.lower() for f, y, t in cited), (family, year)
