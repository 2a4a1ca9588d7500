"""The science: the chapter's claims decided on data. Section 10.7's settings, the study's records,
the declared rule and its verdicts, tables, the numbers the book printed, the figure style, the
measurements behind our explanations and the claims as data. It imports the book's code and the
harness."""
