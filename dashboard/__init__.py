"""The ppo-tune dashboard: a read-only Streamlit app over the studies (see dashboard/app.py)."""
