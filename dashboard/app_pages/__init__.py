"""The dashboard's pages. Streamlit runs each file as a script (declared in dashboard/app.py); this file only
makes setuptools ship them with the package."""
