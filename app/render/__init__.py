"""The words, tables and chart points the Streamlit views and the CLI share: a Profile, a
prediction, a measured run and a recommendation turned into what a person reads (ms and units
on screen, Markdown shown as typed). Drawing the charts is app.charts'; laying them out on a
page is app.views'."""
