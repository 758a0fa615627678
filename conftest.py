pytest_plugins = ["scalegate.plugin"]
