"""The dashboard's pages. Streamlit runs each file as a script (see dashboard.routes); this file only makes
setuptools ship them with the package."""
