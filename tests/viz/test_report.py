from actlab.viz.report import Report


def test_report_renders_both_formats(tmp_path):
    r = Report("Demo <run>")
    r.heading("Results")
    r.paragraph("Success 90% & more")
    r.table([["step_1", 0.9]], ["checkpoint", "success"])
    r.image("plots/loss.png", "Training loss")
    r.links([("episode 0", "videos/ep0.mp4")])
    md, page = r.write(tmp_path)
    text = md.read_text()
    assert "# Demo <run>" in text
    assert "| checkpoint | success |" in text and "| step_1 | 0.9 |" in text
    assert "![Training loss](plots/loss.png)" in text
    h = page.read_text()
    assert "Demo &lt;run&gt;" in h and "Success 90% &amp; more" in h
    assert '<img src="plots/loss.png"' in h and '<a href="videos/ep0.mp4">' in h
    assert "<td>step_1</td><td>0.9</td>" in h
