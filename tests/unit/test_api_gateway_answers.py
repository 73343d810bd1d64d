"""API Gateway's own answers as the template writes them (infra/api_gateway.py), checked against botocore's
model of API Gateway and the OpenAPI document's Problem schema, neither written here."""

import json

import botocore.session
import jsonschema
import pytest

from chalicelib.control import openapi
from infra import api_gateway

PROBLEM = json.loads(openapi.document())["components"]["schemas"]["Problem"]


def as_api_gateway_renders(template: str, request_id: str = "8f1c0d3e-request") -> dict:
    assert "#" not in template  # no VTL directive: what API Gateway puts in is the request's id only
    assert template.count("$") == template.count(api_gateway.REQUEST_ID)
    return json.loads(template.replace(api_gateway.REQUEST_ID, request_id))


def test_every_gateway_response_type_api_gateway_has_is_answered_and_none_made_up():
    model = botocore.session.get_session().get_service_model("apigateway")
    assert set(api_gateway.ANSWERS) == set(model.shape_for("GatewayResponseType").enum)


@pytest.mark.parametrize("kind", sorted(api_gateway.ANSWERS))
def test_each_gateway_response_is_a_problem_with_its_status_and_the_request_id(kind):
    given = api_gateway.gateway_responses()[kind]
    body = as_api_gateway_renders(given["responseTemplates"]["application/json"])
    jsonschema.validate(body, PROBLEM)
    assert body["status"] == int(given["statusCode"]) and body["requestId"] == "8f1c0d3e-request"
    headers = given["responseParameters"]
    assert headers["gatewayresponse.header.Content-Type"] == "'application/problem+json'"
    assert headers["gatewayresponse.header.Cache-Control"] == "'no-store'"


def test_a_path_the_api_does_not_have_is_404_not_api_gateways_misleading_403():
    answer = api_gateway.gateway_responses()["MISSING_AUTHENTICATION_TOKEN"]
    body = as_api_gateway_renders(answer["responseTemplates"]["application/json"])
    assert (answer["statusCode"], body["title"]) == ("404", "Not Found")
    assert "openapi.json" in body["detail"]


def test_throttled_says_when_to_retry():
    answer = api_gateway.gateway_responses()["THROTTLED"]
    assert (answer["statusCode"], answer["responseParameters"]["gatewayresponse.header.Retry-After"]) == ("429", "'1'")


def test_every_path_takes_any_other_method_to_the_apis_function_which_answers_405():
    proxy = {"type": "aws_proxy", "httpMethod": "POST", "uri": {"Fn::Sub": "...${APIHandler.Arn}/invocations"}}
    template = {
        "Resources": {
            "RestAPI": {
                "Properties": {
                    "DefinitionBody": {
                        "paths": {
                            "/things": {
                                "get": {api_gateway.INTEGRATION: proxy},
                                "post": {api_gateway.INTEGRATION: proxy},
                            },
                            "/things/{id}": {"delete": {api_gateway.INTEGRATION: proxy}, "parameters": []},
                        }
                    }
                }
            }
        }
    }
    body = api_gateway.add_own_answers(template)["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]
    for operations in body["paths"].values():
        refusal = operations[api_gateway.ANY_METHOD]
        assert refusal[api_gateway.INTEGRATION] == proxy
        assert set(refusal["responses"]) == {"405"}
    assert set(body[api_gateway.GATEWAY_RESPONSES]) == set(api_gateway.ANSWERS)
