"""Figure builders: pure functions from simulator results to Plotly-ready dicts and exports."""
