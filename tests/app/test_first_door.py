"""What a new user meets first: a 401 says where the key goes and which variable holds it."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer dk_not_a_key"},
                                     {"Authorization": "Basic dXNlcjpwYXNz"}])
def test_a_401_says_where_the_key_goes_and_names_decide_api_key(front_door, headers):
    response = front_door.client.get("/v1/jobs", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    detail = response.json()["detail"]
    assert set(detail) == {"error_type", "message"}
    assert detail["error_type"] == "authentication_error"
    assert "Authorization: Bearer <key>" in detail["message"]
    assert "DECIDE_API_KEY" in detail["message"]
