"""Small fakes of external servers, driven only through the official clients in tests."""
